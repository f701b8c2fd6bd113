"""`conch deploy --dry-run`: every AWS call the deploy would make, with its arguments and the shared-memory
environment, and not one request sent: nothing reaches moto's server (or any listener)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from conftest import INSTANCE, ROLE, Moto
from run_pipelines import image_ensemble

from conch.builder.repository_build import build_ensemble
from conch.builder.shm_sizing import ENV_DEFAULT, MIB
from conch.cli import main
from conch.errors import DeployError
from conch.sagemaker.dry_run import DryRunAws

pytestmark = pytest.mark.integration


def deploy_args(dist: Path, url: str, *extra: str) -> list[str]:
    return ["deploy", str(dist), "--bucket", "conch-models", "--prefix", "mme", "--role", ROLE,
            "--instance-type", INSTANCE, "--max-instances", "3", "--endpoint", "text-mme", "--region", "us-east-1",
            "--endpoint-url", url, *extra]


def plan_of(out: str) -> list[tuple[str, str]]:
    return [(line.split()[1], line.split()[2]) for line in out.splitlines() if line[:3].strip().isdigit()]


def dry_run_with_shm_images(moto: Moto, archives: list[Path]) -> Path:
    """`conch deploy --dry-run` of the archives plus one that needs shared memory; their folder."""
    dist = archives[0].parent
    build_ensemble(image_ensemble("shm_images"), dist, "production")
    assert main(deploy_args(dist, moto.url, "--dry-run")) == 0
    return dist


def test_dry_run_prints_every_call_with_the_shm_environment_and_sends_nothing(
    moto: Moto, bucket: str, archives: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    dry_run_with_shm_images(moto, archives)
    captured = capsys.readouterr()
    assert moto.calls == []  # no boto3 client was even made
    assert moto.client("s3").list_objects_v2(Bucket=bucket).get("KeyCount") == 0
    assert moto.client("sagemaker").list_models()["Models"] == []
    assert moto.client("sagemaker").list_endpoints()["Endpoints"] == []
    assert f"shared memory: set {ENV_DEFAULT}={75 * MIB} (75 MiB" in captured.out
    assert f'"{ENV_DEFAULT}": "{75 * MIB}"' in captured.out
    assert "dry run: conch deploy would make these 18 AWS calls in us-east-1 (none was made" in captured.out
    assert ("s3", "ListObjectsV2") in plan_of(captured.out)  # the fleet check reads what is under the prefix
    writes = [op for op in plan_of(captured.out) if op[1] in
              ("PutObject", "CreateModel", "CreateEndpointConfig", "CreateEndpoint", "RegisterScalableTarget",
               "PutScalingPolicy")]
    assert writes == [("s3", "PutObject")] * 3 + [
        ("sagemaker", "CreateModel"), ("sagemaker", "CreateEndpointConfig"), ("sagemaker", "CreateEndpoint"),
        ("application-autoscaling", "RegisterScalableTarget"), ("application-autoscaling", "PutScalingPolicy")]


def test_the_plan_is_what_a_real_deploy_on_a_fresh_account_does(
    moto: Moto, bucket: str, archives: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    dist = dry_run_with_shm_images(moto, archives)
    planned = plan_of(capsys.readouterr().out)
    assert main(deploy_args(dist, moto.url)) == 0
    made = [(service, operation) for service, operation, _ in moto.calls]
    assert planned == made
    (model,) = moto.called("CreateModel")
    assert model["PrimaryContainer"]["Environment"] == {ENV_DEFAULT: str(75 * MIB)}
    assert f"  shared memory: set {ENV_DEFAULT}={75 * MIB}" in capsys.readouterr().out


def test_nothing_reaches_a_listener_either(archives: list[Path], capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.settimeout(0.5)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        assert main(deploy_args(archives[0].parent, url, "--dry-run")) == 0
        with pytest.raises(TimeoutError, match="timed out"):
            listener.accept()
    assert "CreateEndpoint" in capsys.readouterr().out


def test_arguments_are_checked_against_the_api_model() -> None:
    s3 = DryRunAws("us-east-1").client("s3")
    s3.head_bucket(Bucket="b")
    with pytest.raises(DeployError, match=r"AWS would refuse s3 HeadObject: .*Missing required parameter .*Key"):
        s3.head_object(Bucket="b")
    plan = DryRunAws("us-east-1")
    plan.client("sagemaker").create_endpoint(EndpointName="e", EndpointConfigName="c")
    assert json.loads(json.dumps(plan.calls[0].params)) == {"EndpointName": "e", "EndpointConfigName": "c"}
