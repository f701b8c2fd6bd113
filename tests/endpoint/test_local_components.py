"""The local endpoint with inference components as a boto3 user sees it: calls routed by InferenceComponentName
(one tritonserver per copy), a component at zero copies refusing as SageMaker does and counting the refusal
under NoCapacityInvocationFailures, serving after its scale-out, and reservations that do not fit refused."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from botocore.exceptions import ClientError
from conftest import linear_ensemble
from mme_archives import EXPECTED, X, runtime

from conch.builder.repository_build import build_ensemble
from conch.endpoint.component_app import NO_CAPACITY, runtime_config_body
from conch.endpoint.local_components import LocalComponents
from conch.errors import ServeError
from conch.wire import json_request

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def archives(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    built = tmp_path_factory.mktemp("built")
    return [build_ensemble(linear_ensemble(name), built, "local") for name in ("ic_a", "ic_b")]


@pytest.fixture(scope="module")
def endpoint(archives: list[Path]) -> Iterator[LocalComponents]:
    """ic_a with one copy, ic_b scaled to zero."""
    with LocalComponents(archives, endpoint_name="text-ic", copies={"text-ic-ic-b": 0}, memory_mb={"ic_a.tar.gz": 512},
                         instance_memory_mb=4096) as local:
        yield local


def invoke(url: str, component: str | None) -> np.ndarray:
    body, content_type = json_request({"X": X})
    extra = {"InferenceComponentName": component} if component else {}
    response = runtime(url).invoke_endpoint(EndpointName="text-ic", ContentType=content_type, Body=body, **extra)
    out = json.loads(response["Body"].read())["outputs"][0]
    return np.array(out["data"], dtype=np.float32).reshape(out["shape"])


def test_a_call_is_routed_by_its_inference_component(endpoint: LocalComponents) -> None:
    np.testing.assert_array_equal(invoke(endpoint.url, "text-ic-ic-a"), EXPECTED)
    counted = endpoint.metrics_json()["components"]["text-ic-ic-a"]
    assert counted["Invocations"] >= 1 and counted["ModelLatency_count"] >= 1 and counted["CopyCount"] == 1


def test_a_component_at_zero_copies_refuses_counts_and_serves_after_its_scale_out(endpoint: LocalComponents) -> None:
    with pytest.raises(ClientError) as refused:
        invoke(endpoint.url, "text-ic-ic-b")
    assert refused.value.response["Error"]["Code"] == "ValidationError"
    assert refused.value.response["Error"]["Message"] == NO_CAPACITY
    assert endpoint.metrics_json()["components"]["text-ic-ic-b"]["NoCapacityInvocationFailures"] == 1
    scaled = httpx.post(f"{endpoint.url}/inference-components/text-ic-ic-b/runtime-config",
                        content=runtime_config_body(1), timeout=10)
    assert scaled.status_code == 200
    deadline = time.monotonic() + 300
    while endpoint.metrics_json()["copies"]["text-ic-ic-b"] < 1:  # the copy's tritonserver starts meanwhile
        assert time.monotonic() < deadline
        time.sleep(0.5)
    np.testing.assert_array_equal(invoke(endpoint.url, "text-ic-ic-b"), EXPECTED)
    httpx.post(f"{endpoint.url}/inference-components/text-ic-ic-b/runtime-config", content=runtime_config_body(0),
               timeout=10).raise_for_status()
    with pytest.raises(ClientError, match="no capacity"):
        invoke(endpoint.url, "text-ic-ic-b")


def test_calls_without_or_with_an_unknown_component_are_refused(endpoint: LocalComponents) -> None:
    with pytest.raises(ClientError, match="Inference Component Name header is required"):
        invoke(endpoint.url, None)
    with pytest.raises(ClientError, match="Inference component 'nope' not found on endpoint 'text-ic'"):
        invoke(endpoint.url, "nope")


def test_a_scale_out_past_the_instance_memory_is_refused_with_the_numbers(endpoint: LocalComponents) -> None:
    answer = httpx.post(f"{endpoint.url}/inference-components/text-ic-ic-a/runtime-config",
                        content=runtime_config_body(9), timeout=10)
    assert answer.status_code == 400
    assert ("inference component 'text-ic-ic-a': 9 copies x 512 MiB do not fit the instance's 4096 MiB (the other "
            "components reserve 0 MiB)") in answer.json()["Message"]
    bad = httpx.post(f"{endpoint.url}/inference-components/text-ic-ic-a/runtime-config", content=b"{}", timeout=10)
    assert "give {\"DesiredRuntimeConfig\": {\"CopyCount\": N}}" in bad.json()["Message"]


def test_components_that_do_not_fit_are_refused_at_create(archives: list[Path]) -> None:
    with pytest.raises(ServeError, match="inference component 'local-ic-b': 1 copies x 1024 MiB do not fit the "
                                         "instance's 1500 MiB \\(the other components reserve 1024 MiB\\)"):
        LocalComponents(archives, instance_memory_mb=1500).start()
    with pytest.raises(ServeError, match="copies given for local-nope: no such component"):
        LocalComponents(archives, copies={"local-nope": 1})
    with pytest.raises(ServeError, match="nothing to serve: give .tar.gz archives"):
        LocalComponents([])
    with pytest.raises(ServeError, match="endpoint name 'a_b': SageMaker takes 1 to 63"):
        LocalComponents(archives, endpoint_name="a_b")


def test_another_endpoint_name_is_refused(endpoint: LocalComponents) -> None:
    body, content_type = json_request({"X": X})
    with pytest.raises(ClientError, match="Endpoint other of account local not found. This local endpoint is "
                                          "'text-ic'"):
        runtime(endpoint.url).invoke_endpoint(EndpointName="other", InferenceComponentName="text-ic-ic-a",
                                              ContentType=content_type, Body=body)


def test_scaling_mistakes_are_refused_before_any_copy_starts(archives: list[Path], tmp_path: Path) -> None:
    local = LocalComponents(archives)
    with pytest.raises(ServeError, match="no inference component 'nope' \\(the components are local-ic-a, "
                                         "local-ic-b\\)"):
        local.scale("nope", 1)
    with pytest.raises(ServeError, match="inference component 'local-ic-a': -1 copies; give 0 or more"):
        local.scale("local-ic-a", -1)
    twins = [tmp_path / "a_b.tar.gz", tmp_path / "a-b.tar.gz"]
    with pytest.raises(ServeError, match="two archives make the component 'local-a-b': rename one"):
        LocalComponents(twins)


def test_serve_components_takes_archives_not_an_mme_source(capsys: pytest.CaptureFixture[str]) -> None:
    from conch.cli import main

    assert main(["serve", "--components", "--mme", "dist/"]) == 2
    assert "--components serves the archives (or ensembles) given, each an inference component" in (
        capsys.readouterr().err)


def test_conch_serve_components_prints_its_ready_line_and_serves_until_sigterm(archives: list[Path]) -> None:
    import os
    import signal
    import subprocess
    import sys

    root = str(Path(__file__).parents[3])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    server = subprocess.Popen([sys.executable, "-m", "conch", "serve", "--components", *map(str, archives), "--port",
                               "0", "--endpoint-name", "text-ic", "--zero", "ic_b.tar.gz", "--memory", "4GiB",
                               "--component-memory", "300MiB"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env=env, text=True)
    try:
        assert server.stdout is not None
        ready = json.loads(server.stdout.readline())
        assert ready["components"]["text-ic-ic-b"] == {"archive": "ic_b.tar.gz", "copies": 0, "memory_mb": 300}
        assert ready["instance_memory_mb"] == 4096
        np.testing.assert_array_equal(invoke(ready["url"], "text-ic-ic-a"), EXPECTED)
        with pytest.raises(ClientError, match="no capacity"):
            invoke(ready["url"], "text-ic-ic-b")
    finally:
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=60) == 143
