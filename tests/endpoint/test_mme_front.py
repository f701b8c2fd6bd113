"""The local MME as a boto3 user sees it: lazy loads, LRU unloads within --max-loaded, SageMaker's metric
names, and SageMaker's error shapes, through the real sagemaker-runtime client and a real tritonserver."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from botocore.exceptions import ClientError
from conftest import linear_ensemble
from mme_archives import EXPECTED, copies, invoke_linear, runtime

from conch.builder.repository_build import build_ensemble
from conch.endpoint import LocalMME

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def linear_archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_ensemble(linear_ensemble("mme_linear"), tmp_path_factory.mktemp("built"), "local")


def four_copies(linear_archive: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = tmp_path_factory.mktemp("source")
    copies(linear_archive, source, [f"m{i}.tar.gz" for i in range(4)])
    return source


@pytest.fixture(scope="module")
def mme(linear_archive: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalMME]:
    """Four copies of one archive behind one endpoint that keeps at most two loaded; the copies get step names
    of their own (--step-names isolate: what `conch deploy` uploads), so that LRU is the only churn."""
    with LocalMME(four_copies(linear_archive, tmp_path_factory), max_loaded=2, step_names="isolate") as endpoint:
        yield endpoint


@pytest.fixture
def fresh_mme(linear_archive: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalMME]:
    """The same, started for one test: its counters and loaded models owe nothing to the tests before it."""
    with LocalMME(four_copies(linear_archive, tmp_path_factory), max_loaded=2, step_names="isolate") as endpoint:
        yield endpoint


def test_models_load_on_first_call_and_the_least_recently_used_is_unloaded(fresh_mme: LocalMME) -> None:
    mme = fresh_mme
    rt = runtime(mme.url)
    assert httpx.get(f"{mme.url}/ping", timeout=5).status_code == 200
    before = mme.metrics_json()
    for name in ("m0.tar.gz", "m1.tar.gz", "m0.tar.gz", "m2.tar.gz", "m3.tar.gz", "m0.tar.gz"):
        np.testing.assert_array_equal(invoke_linear(rt, name), EXPECTED)
    after = mme.metrics_json()
    # m0 was used more recently than m1, so m2 evicted m1; m3 evicted m0; m0 came back in place of m2
    assert after["loaded"] == ["m0.tar.gz", "m3.tar.gz"]
    assert after["LoadedModelCount"] == 2 and after["LoadedModelCountPeak"] <= 2
    assert after["ModelLoads"]["reload"] - before["ModelLoads"]["reload"] == 1
    assert sum(after["ModelUnloads"].values()) - sum(before["ModelUnloads"].values()) == 3
    assert after["ModelCacheHit"]["hits"] - before["ModelCacheHit"]["hits"] == 1
    assert after["ModelDownloads"] - before["ModelDownloads"] == 4  # the reload of m0 came from the disk cache
    text = httpx.get(f"{mme.url}/metrics", timeout=5).text
    for name in ("ModelLoadingWaitTime", "ModelDownloadingTime", "ModelLoadingTime", "ModelUnloadingTime",
                 "ModelCacheHit", "LoadedModelCount", "MemoryUsedBytes", "DiskUsedBytes"):
        assert f"\n{name}" in text, name
    assert "LoadedModelCount 2.0" in text


def test_a_missing_target_model_is_a_validation_error_naming_it(mme: LocalMME) -> None:
    rt = runtime(mme.url)
    with pytest.raises(ClientError) as caught:
        invoke_linear(rt, "no_such_model.tar.gz")
    error = caught.value.response["Error"]
    assert error["Code"] == "ValidationError"
    assert "'no_such_model.tar.gz'" in error["Message"]
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    np.testing.assert_array_equal(invoke_linear(rt, "m1.tar.gz"), EXPECTED)  # the others keep answering


def test_a_malformed_body_is_a_model_error_with_tritons_status(mme: LocalMME) -> None:
    rt = runtime(mme.url)
    with pytest.raises(ClientError) as caught:
        rt.invoke_endpoint(EndpointName="local", TargetModel="m1.tar.gz", ContentType="application/json",
                           Body=b'{"inputs": [')
    response = caught.value.response
    assert response["Error"]["Code"] == "ModelError"
    assert response["OriginalStatusCode"] == 400 and "m1.tar.gz" in response["Error"]["Message"]
    np.testing.assert_array_equal(invoke_linear(rt, "m1.tar.gz"), EXPECTED)


def test_wrong_endpoint_name_and_missing_header_are_validation_errors(mme: LocalMME) -> None:
    rt = runtime(mme.url)
    with pytest.raises(ClientError) as wrong:
        rt.invoke_endpoint(EndpointName="other", TargetModel="m1.tar.gz", ContentType="application/json", Body=b"{}")
    assert wrong.value.response["Error"]["Code"] == "ValidationError"
    assert "'local'" in wrong.value.response["Error"]["Message"]
    with pytest.raises(ClientError) as no_header:
        rt.invoke_endpoint(EndpointName="local", ContentType="application/json", Body=b"{}")
    assert no_header.value.response["Error"]["Code"] == "ValidationError"
    assert "target model header" in no_header.value.response["Error"]["Message"]


@pytest.mark.parametrize("retry_lookup, retries", [(False, 0), (True, 1)])
def test_an_unknown_model_answer_for_a_loaded_model_is_passed_on_and_counted(
        linear_archive: Path, tmp_path: Path, retry_lookup: bool, retries: int) -> None:
    """Triton 2.51 can miss a loaded model's name while another model loads or unloads (a race); here the miss
    is made lasting by unloading the ensemble behind the SageMaker front end's back. By default the answer goes
    to the caller as SageMaker passes it on; --retry-lookup asks once more first, and counts it."""
    copies(linear_archive, tmp_path / "src", ["lost.tar.gz"])
    with LocalMME(tmp_path / "src", retry_lookup=retry_lookup) as endpoint:
        rt = runtime(endpoint.url)
        np.testing.assert_array_equal(invoke_linear(rt, "lost.tar.gz"), EXPECTED)
        unload = httpx.post(f"{endpoint.triton.http_url}/v2/repository/models/lost.tar.gz/unload", timeout=60)
        assert unload.status_code == 200
        with pytest.raises(ClientError) as lost:
            invoke_linear(rt, "lost.tar.gz")
        metrics = endpoint.metrics_json()
        counts = endpoint.counts()
    error = lost.value.response["Error"]
    assert error["Code"] == "ModelError" and "model 'lost.tar.gz' is not found" in error["Message"]
    assert lost.value.response["OriginalStatusCode"] == 400
    assert metrics["TritonLookupRetries"] == retries
    assert metrics["TritonLookupMisses"] == 1 + retries  # every 'unknown model' answer, retried or not
    assert counts["lookup_retries"] == retries and counts["lookup_misses"] == 1 + retries


def test_an_answer_on_the_wire_carries_sagemakers_headers_and_no_server_header(mme: LocalMME) -> None:
    import socket

    from mme_archives import X

    from conch.wire import TARGET_HEADER, json_request

    body, content_type = json_request({"X": X})
    invoke_linear(runtime(mme.url), "m0.tar.gz")  # loaded first
    request = (f"POST /endpoints/local/invocations HTTP/1.1\r\nHost: x\r\n{TARGET_HEADER}: m0.tar.gz\r\n"
               f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body
    with socket.create_connection((mme.host, mme.port), timeout=60) as sock:
        sock.sendall(request)
        answer = b""
        while b"\r\n\r\n" not in answer:
            answer += sock.recv(65536)
    head = answer.split(b"\r\n\r\n")[0].decode("latin-1").lower().split("\r\n")
    names = [line.split(":")[0] for line in head[1:]]
    assert head[0] == "http/1.1 200 ok"
    assert names == ["date", "content-type", "x-amzn-invoked-production-variant", "content-length"]


def test_a_callers_idle_connection_is_kept_then_closed_after_the_keep_alive_timeout(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """uvicorn's ``timeout_keep_alive``: a connection serves call after call, and is closed by the front once it
    has been idle that long after an answer."""
    import socket
    import time

    from conch.endpoint import local

    monkeypatch.setattr(local, "KEEP_ALIVE_S", 1)
    with LocalMME(tmp_path) as mme, socket.create_connection(("127.0.0.1", mme.port), timeout=10) as caller:
        for _ in range(2):
            caller.sendall(b"GET /ping HTTP/1.1\r\nHost: local\r\n\r\n")
            assert caller.recv(4096).startswith(b"HTTP/1.1 200 OK")
            time.sleep(0.3)  # idle, but less than the timeout: the connection stays open
        start = time.monotonic()
        assert caller.recv(4096) == b""  # closed by the front
        assert 0.4 <= time.monotonic() - start < 5
