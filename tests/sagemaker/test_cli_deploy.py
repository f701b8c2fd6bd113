"""`conch deploy | invoke | undeploy` as users run them, against moto's server on 127.0.0.1."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import INSTANCE, ROLE, Moto, linear_ensemble
from test_runtime import _received_by_moto

from conch.builder.repository_build import build_ensemble
from conch.cli import main

pytestmark = pytest.mark.integration

CLI = Path(__file__)  # any .py file: deploy refuses it


def conch(*args: str) -> subprocess.CompletedProcess[str]:
    """A `conch` process; it inherits the fake credentials and AWS_ENDPOINT_URL of the `moto` fixture."""
    return subprocess.run([sys.executable, "-m", "conch.cli", *args], capture_output=True, text=True, timeout=300)


def aws_args(moto: Moto) -> list[str]:
    return ["--endpoint", "text-mme", "--region", "us-east-1", "--endpoint-url", moto.url]


def test_deploy_invoke_undeploy(moto: Moto, bucket: str, archives: list[Path], tmp_path: Path) -> None:
    dist = archives[0].parent
    deploy = ["deploy", str(dist), "--bucket", bucket, "--prefix", "mme", "--role", ROLE,
              "--instance-type", INSTANCE, "--max-instances", "3", *aws_args(moto)]
    first = conch(*deploy)
    assert first.returncode == 0, first.stderr
    assert "endpoint text-mme created (InService) in us-east-1: 1 x ml.g4dn.xlarge" in first.stdout
    assert "uploaded  s3://conch-models/mme/linear_a.tar.gz  TargetModel=linear_a.tar.gz" in first.stdout
    assert "autoscaling 1..3 instances, target 60 GPUUtilization %" in first.stdout

    sm = moto.client("sagemaker")
    config = sm.describe_endpoint_config(EndpointConfigName=sm.describe_endpoint(EndpointName="text-mme")[
        "EndpointConfigName"])
    container = sm.describe_model(ModelName=config["ProductionVariants"][0]["ModelName"])["PrimaryContainer"]
    assert container == {"Image": "785573368785.dkr.ecr.us-east-1.amazonaws.com/sagemaker-tritonserver:24.10-py3",
                         "ModelDataUrl": "s3://conch-models/mme/", "Mode": "MultiModel", "Environment": {}}
    policies = moto.client("application-autoscaling").describe_scaling_policies(ServiceNamespace="sagemaker")
    assert [p["PolicyName"] for p in policies["ScalingPolicies"]] == ["conch-gpu"]

    again = conch(*deploy)
    assert again.returncode == 0, again.stderr
    assert "endpoint text-mme unchanged (InService)" in again.stdout
    assert again.stdout.count("unchanged s3://conch-models/mme/") == 2

    invoked = conch("invoke", "--archive", str(archives[0]), "--body", "json", *aws_args(moto))
    # moto's answer is not Triton's: what is proven here is the request; the replay row fails, exit code 1
    assert invoked.returncode == 1 and "FAIL" in invoked.stdout and "not a KServe v2" in invoked.stdout
    (received,) = _received_by_moto()
    assert {k.lower(): v for k, v in received.items()}["x-amzn-sagemaker-target-model"] == "linear_a.tar.gz"

    request = tmp_path / "request.json"
    request.write_text(json.dumps({"inputs": [{"name": "X", "shape": [1, 4], "datatype": "FP32", "data": [1] * 4}]}))
    raw = conch("invoke", "--json", str(request), "--target-model", "linear_b.tar.gz", *aws_args(moto))
    assert raw.returncode == 0, raw.stderr
    assert json.loads(_received_by_moto()[-1]["Body"]) == json.loads(request.read_text())

    gone = conch("undeploy", *aws_args(moto))
    assert gone.returncode == 0, gone.stderr
    assert "deleted autoscaling of text-mme/AllTraffic" in gone.stdout and "deleted endpoint text-mme" in gone.stdout
    assert sm.list_endpoints()["Endpoints"] == [] and sm.list_models()["Models"] == []
    assert sm.list_endpoint_configs()["EndpointConfigs"] == []
    assert moto.client("application-autoscaling").describe_scalable_targets(
        ServiceNamespace="sagemaker")["ScalableTargets"] == []
    assert len(moto.client("s3").list_objects_v2(Bucket=bucket)["Contents"]) == 2  # archives stay

    twice = conch("undeploy", *aws_args(moto))
    assert twice.returncode == 2 and "conch: error: nothing to undeploy" in twice.stderr
    assert "Traceback" not in twice.stderr


def test_a_missing_bucket_is_one_line_without_traceback(moto: Moto, archives: list[Path]) -> None:
    result = conch("deploy", *map(str, archives), "--bucket", "nope-bucket", "--role", ROLE, *aws_args(moto))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith("conch: error: S3 bucket 'nope-bucket' does not exist")
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(("extra", "message"), [
    (["--instance-type", "ml.g5.12xlarge"], "instance type ml.g5.12xlarge has 4 GPUs, but SageMaker GPU"),
    (["--release", "24.05"], "were built for Triton 24.10 but the endpoint would run 24.05; deploy with --release"),
    (["--region", "mars-1"], "does not know the SageMaker Triton image registry of region 'mars-1'"),
    (["--max-instances", "2", "--no-wait"], "autoscaling needs the endpoint InService: drop --no-wait"),
    (["--instance-type", "ml.c5.xlarge", "--max-instances", "2"], "scaling on invocations needs --target-value"),
    (["--instance-type", "ml.c5.xlarge", "--max-instances", "2", "--scale-on", "gpu"],
     "ml.c5.xlarge has no GPU, so it reports no GPUUtilization"),
    (["--min-instances", "2"], "autoscaling needs --max-instances"),
    (["--env", "NOEQUALS"], "--env 'NOEQUALS': write KEY=VALUE"),
])
def test_deploy_mistakes_are_named_before_anything_is_created(
    moto: Moto, bucket: str, archives: list[Path], capsys: pytest.CaptureFixture[str],
    extra: list[str], message: str,
) -> None:
    args = ["deploy", *map(str, archives), "--bucket", bucket, "--role", ROLE, "--instance-type", INSTANCE,
            *aws_args(moto), *extra]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("conch: error: ") and message in err, err
    assert not moto.called("PutObject") and not moto.called("CreateModel")


def test_archives_that_are_not_for_sagemaker_are_refused(
    moto: Moto, bucket: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    local = build_ensemble(linear_ensemble("linear_local"), tmp_path, "local")
    assert main(["deploy", str(local), "--bucket", bucket, "--role", ROLE, *aws_args(moto)]) == 2
    assert "linear_local.tar.gz is a 'local' build (CPU stand-ins" in capsys.readouterr().err
    assert main(["deploy", str(CLI), "--bucket", bucket, "--role", ROLE, *aws_args(moto)]) == 2
    assert "deploy takes built archives (.tar.gz), not" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["deploy", str(empty), "--bucket", bucket, "--role", ROLE, *aws_args(moto)]) == 2
    assert "empty holds no .tar.gz archives: run `conch build --out" in capsys.readouterr().err
    assert main(["deploy", str(tmp_path / "missing.tar.gz"), "--bucket", bucket, "--role", ROLE, *aws_args(moto)]) == 2
    assert "missing.tar.gz: no such archive" in capsys.readouterr().err


def test_invoke_mistakes(moto: Moto, archives: list[Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["invoke", *aws_args(moto)]) == 2
    assert "give --archive PATH" in capsys.readouterr().err
    assert main(["invoke", "--archive", str(archives[0]), "--sample", "nope", *aws_args(moto)]) == 2
    assert "linear_a.tar.gz has no sample 'nope'; its samples: two rows" in capsys.readouterr().err
    assert not moto.called("InvokeEndpoint")


@pytest.fixture
def endpoints_stay_creating(monkeypatch: pytest.MonkeyPatch) -> None:
    """moto puts a new endpoint InService at once; a real one is Creating for minutes. Hold it there."""
    from moto.sagemaker.models import SageMakerModelBackend

    create = SageMakerModelBackend.create_endpoint

    def creating(self: Any, *args: Any, **kwargs: Any) -> Any:
        endpoint = create(self, *args, **kwargs)
        endpoint.endpoint_status = "Creating"
        return endpoint

    monkeypatch.setattr(SageMakerModelBackend, "create_endpoint", creating)


def test_no_wait_wait_timeout_and_image(moto: Moto, bucket: str, archives: list[Path], endpoints_stay_creating: None,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    image = "123456789012.dkr.ecr.us-east-1.amazonaws.com/my-triton:24.10-custom"
    deploy = ["deploy", *map(str, archives), "--bucket", bucket, "--role", ROLE, "--instance-type", INSTANCE,
              "--image", image, *aws_args(moto)]
    started = time.monotonic()
    assert main([*deploy, "--wait-timeout", "0.5"]) == 2
    assert time.monotonic() - started < 15  # the wait ends at its timeout (0.5 s), not at a 15 s poll after it
    err = capsys.readouterr().err
    assert "conch: error: endpoint 'text-mme' is still Creating after 0 s" in err
    assert "or wait longer with --wait-timeout" in err
    assert main([*deploy, "--no-wait"]) == 0
    assert "endpoint text-mme unchanged (Creating) in us-east-1" in capsys.readouterr().out
    sm = moto.client("sagemaker")
    config = sm.describe_endpoint_config(EndpointConfigName=sm.describe_endpoint(EndpointName="text-mme")[
        "EndpointConfigName"])
    container = sm.describe_model(ModelName=config["ProductionVariants"][0]["ModelName"])["PrimaryContainer"]
    assert container["Image"] == image


def test_two_archives_with_one_target_model_are_refused(moto: Moto, bucket: str, archives: list[Path],
                                                        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = build_ensemble(linear_ensemble("linear_a"), tmp_path / "other", "production")
    assert other.name == archives[0].name and other != archives[0]
    assert main(["deploy", str(archives[0]), str(other), "--bucket", bucket, "--role", ROLE, *aws_args(moto)]) == 2
    assert "two archives are named linear_a.tar.gz; under one prefix the file name is the TargetModel" in \
        capsys.readouterr().err
    assert not moto.called("PutObject") and not moto.called("CreateModel")


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_aws_errors_without_region_credentials_or_connection(
    moto: Moto, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from botocore.exceptions import NoCredentialsError

    from conch import DeployError
    from conch.aws import aws_errors

    for name in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name)
    assert main(["undeploy", "--endpoint", "text-mme"]) == 2  # for AWS itself (a loopback server needs no region)
    assert capsys.readouterr().err == ("conch: error: no AWS region: pass --region (e.g. us-east-1) or set "
                                       "AWS_REGION / a profile's region\n")

    # Only AWS itself needs credentials (a loopback server gets a signature from stand-in ones), and no test
    # may reach AWS: botocore's own exception, as signing raises it, is what conch must explain.
    doing = "describing endpoint 'text-mme'"
    with pytest.raises(DeployError, match=rf"{doing}: no AWS credentials found; configure them \(aws configure"), \
            aws_errors(doing):
        raise NoCredentialsError()

    closed = f"http://127.0.0.1:{_closed_port()}"
    assert main(["undeploy", "--endpoint", "text-mme", "--region", "us-east-1", "--endpoint-url", closed]) == 2
    assert capsys.readouterr().err.startswith(f"conch: error: describing endpoint 'text-mme': Could not connect to "
                                              f'the endpoint URL: "{closed}/"')
