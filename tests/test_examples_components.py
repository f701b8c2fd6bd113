"""The examples as inference components, end to end (slow: every example is built for production and for
local): `conch deploy --components --dry-run` plans one model and component each and every planned request
passes a real boto3 client behind botocore's Stubber; `pytest --conch --conch-components` is green against
`conch serve --components`'s local endpoint over them."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from conftest import EXAMPLE_FILES, ExampleArchives

from conch.cli import main
from conch.endpoint.local_components import LocalComponents
from conch.sagemaker.dry_run import DryRunAws

pytest_plugins = ["pytester"]
pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROLE = "arn:aws:iam::123456789012:role/SageMakerExecution"
# production needs a GPU host for TensorRT plans (docs/declare.md): the other examples deploy
DEPLOYABLE = tuple(f for f in EXAMPLE_FILES if f != "resnet_tensorrt.py")


def test_the_examples_deploy_as_components_and_every_request_passes_botocore(
        examples: ExampleArchives, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sys.path.insert(0, str(Path(__file__).parent / "sagemaker"))
    try:
        from stubbed import send_through_stubber
    finally:
        sys.path.pop(0)
    dist = tmp_path / "dist"
    dist.mkdir()
    for file in DEPLOYABLE:
        os.symlink(examples.archive(file, "production"), dist / f"{Path(file).stem}.tar.gz")
    planned: list[DryRunAws] = []
    original = DryRunAws.report
    monkeypatch.setattr(DryRunAws, "report", lambda self: planned.append(self) or original(self))
    assert main(["deploy", str(dist), "--components", "--bucket", "conch-models", "--role", ROLE, "--endpoint",
                 "examples-ic", "--region", "us-east-1", "--min-instances", "0", "--max-instances", "2",
                 "--max-copies", "2", "--invocations-per-copy", "60", "--dry-run"]) == 0
    created = [c.params["InferenceComponentName"] for c in planned[0].calls
               if c.operation == "CreateInferenceComponent"]
    assert len(created) == len(DEPLOYABLE)
    for call in planned[0].calls:
        if call.service != "s3":
            send_through_stubber(call.service, call.operation, call.params)


def test_pytest_conch_is_green_against_the_local_component_endpoint(
        examples: ExampleArchives, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    archives = [examples.archive(file, "local") for file in EXAMPLE_FILES]
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "local")
    root = str(Path(__file__).parents[1])
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    with LocalComponents(archives, endpoint_name="examples-ic") as local:
        result = pytester.runpytest_subprocess("-p", "conch.pytest_plugin", "-p", "no:cacheprovider", "-p",
                                               "no:randomly", "--conch", *map(str, archives), "--conch-endpoint",
                                               "examples-ic", "--conch-components", "--conch-endpoint-url", local.url,
                                               timeout=900)
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) == 0 and outcomes["passed"] >= 2 * len(archives)  # samples x bodies

