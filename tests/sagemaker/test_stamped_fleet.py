"""Issue 17's done-means for the archive side: one two-step archive uploaded 20 times with `conch deploy --copies 20`
to a real S3 server (moto on 127.0.0.1), served by the local MME with the archives' step names as uploaded (what
SageMaker's image does), with churn (fewer slots than copies): every answer right, 0 restarts. The same copies
uploaded raw fail `conch check s3://…`, naming the collision, and `conch deploy` stamps them; two versions of one
ensemble likewise."""

from __future__ import annotations

import json
import random
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from botocore.exceptions import ClientError
from conftest import INSTANCE, ROLE, Moto, linear_ensemble

from conch.builder.repository_build import build_ensemble
from conch.cli import main
from conch.endpoint import LocalMME
from conch.endpoint.app import LOOKUP_MISSES
from conch.wire import json_request

pytestmark = pytest.mark.integration
COPIES = 20
X = np.arange(8, dtype=np.float32).reshape(2, 4)
EXPECTED = X * 2 + 1


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The two-step ensemble (X -> double -> add_one -> Z), built for SageMaker."""
    return build_ensemble(linear_ensemble("fleet20"), tmp_path_factory.mktemp("built"), "production")


def deploy(moto: Moto, bucket: str, prefix: str, *args: str) -> int:
    return main(["deploy", *args, "--bucket", bucket, "--prefix", prefix, "--role", ROLE, "--instance-type",
                 INSTANCE, "--endpoint", "fleet-mme", "--region", "us-east-1", "--endpoint-url", moto.url, "--no-wait"])


def check(moto: Moto, bucket: str, prefix: str) -> int:
    return main(["check", f"s3://{bucket}/{prefix}", "--s3-endpoint-url", moto.url, "--region", "us-east-1"])


def put_raw(moto: Moto, bucket: str, prefix: str, archive: Path, names: list[str]) -> None:
    s3 = moto.client("s3")
    for name in names:
        s3.put_object(Bucket=bucket, Key=f"{prefix}/{name}", Body=archive.read_bytes())


def runtime(url: str) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client("sagemaker-runtime", endpoint_url=url, region_name="us-east-1", aws_access_key_id="x",
                        aws_secret_access_key="x", config=Config(retries={"total_max_attempts": 1}, read_timeout=300))


def serve(moto: Moto, bucket: str, prefix: str, names: list[str], max_loaded: int, calls: int) -> dict[str, Any]:
    """Every name called at least once, ``calls`` in all from 4 threads, through boto3's sagemaker-runtime client,
    with the archives' step names as uploaded; the front's metrics after."""
    order = names + random.Random(7).choices(names, k=max(0, calls - len(names)))
    random.Random(11).shuffle(order)
    races: list[str] = []
    local = threading.local()
    with LocalMME(f"s3://{bucket}/{prefix}", s3_endpoint_url=moto.url, step_names="shared",
                  max_loaded=max_loaded) as mme:

        def call(name: str) -> np.ndarray | None:
            if not hasattr(local, "rt"):
                local.rt = runtime(mme.url)
            body, content_type = json_request({"X": X})
            try:
                response = local.rt.invoke_endpoint(EndpointName="local", TargetModel=name, ContentType=content_type,
                                                    Body=body)
            except ClientError as exc:  # Triton 2.51's lookup race (counted, never absorbed); anything else fails
                if not any(m in exc.response["Error"]["Message"] for m in LOOKUP_MISSES):
                    raise
                races.append(name)
                return None
            out = json.loads(response["Body"].read())["outputs"][0]
            return np.array(out["data"], dtype=np.float32).reshape(out["shape"])

        with ThreadPoolExecutor(max_workers=4) as pool:
            answers = list(pool.map(call, order))
        metrics = mme.metrics_json()
    for name, z in zip(order, answers, strict=True):
        if z is not None:
            np.testing.assert_array_equal(z, EXPECTED, err_msg=name)
    assert len(races) <= calls // 10, f"Triton's lookup race hit {len(races)} of {calls} calls: {races}"
    assert metrics["Invocations"]["2XX"] == calls - len(races)
    assert metrics["TritonRestarts"] == 0  # tritonserver never crashed under the churn
    assert metrics["StepNameCollisions"] == 0  # stamped: no TargetModel shares a step name with another
    assert metrics["TritonLookupMisses"] == len(races) and metrics["TritonLookupRetries"] == 0  # shown, not absorbed
    assert metrics["ModelLoads"]["cold"] == len(names) and metrics["LoadedModelCountPeak"] <= max_loaded
    return metrics


@pytest.mark.slow
def test_twenty_raw_copies_fail_the_check_and_deployed_with_copies_serve_under_their_own_step_names(
        moto: Moto, bucket: str, built: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The same 20 copies uploaded raw fail the check naming the collision; `conch deploy --copies 20` stamps
    them (replacing the raw ones) and they serve under churn. One deploy of the copies for both halves of the
    done-means (the upload of copies to an empty prefix: tests/sagemaker/test_deploy_stamp.py)."""
    names = [f"fleet20-{i}.tar.gz" for i in range(1, COPIES + 1)]
    put_raw(moto, bucket, "copies", built, names)
    assert check(moto, bucket, "copies") == 1
    err = capsys.readouterr().err
    assert (f"conch: error: fleet: fleet20-1.tar.gz, fleet20-10.tar.gz, fleet20-11.tar.gz, fleet20-12.tar.gz, "
            f"fleet20-13.tar.gz and 15 more all {COPIES} hold step models fleet20__add_one, fleet20__double") in err
    assert "`conch stamp ARCHIVE --as NAME`" in err
    assert deploy(moto, bucket, "copies", str(built), "--copies", str(COPIES)) == 0
    out = capsys.readouterr().out
    assert out.count("  replaced  s3://conch-models/copies/fleet20-") == COPIES
    assert out.count("stamped fleet20.tar.gz as fleet20-") == COPIES
    assert check(moto, bucket, "copies") == 0
    assert f"fleet: ok: {COPIES} archives can share one endpoint" in capsys.readouterr().out
    metrics = serve(moto, bucket, "copies", names, max_loaded=8, calls=COPIES + 4)
    assert metrics["ModelLoads"]["reload"] >= 4 or sum(metrics["ModelUnloads"].values()) >= COPIES - 8  # churn


def test_two_versions_fail_the_check_raw_and_serve_once_the_new_one_is_stamped(
        moto: Moto, bucket: str, built: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    put_raw(moto, bucket, "versions", built, ["x-v1.tar.gz", "x-v2.tar.gz"])
    assert check(moto, bucket, "versions") == 1
    assert ("fleet: x-v1.tar.gz, x-v2.tar.gz both hold step models fleet20__add_one, fleet20__double"
            in capsys.readouterr().err)
    v2 = tmp_path / "x-v2.tar.gz"
    v2.write_bytes(built.read_bytes())  # the new version as built: the same step names as x-v1
    assert deploy(moto, bucket, "versions", str(v2)) == 0
    out = capsys.readouterr().out
    assert ("stamped x-v2.tar.gz as x-v2.tar.gz (step models fleet20__add_one, fleet20__double already used by "
            "x-v1.tar.gz)") in out
    assert check(moto, bucket, "versions") == 0
    serve(moto, bucket, "versions", ["x-v1.tar.gz", "x-v2.tar.gz"], max_loaded=1, calls=8)


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_twenty_stamped_copies_under_heavy_churn(moto: Moto, bucket: str, built: Path) -> None:
    """The bigger run: 300 calls over 20 stamped copies behind 5 slots, step names as uploaded."""
    assert deploy(moto, bucket, "heavy", str(built), "--copies", str(COPIES)) == 0
    metrics = serve(moto, bucket, "heavy", [f"fleet20-{i}.tar.gz" for i in range(1, COPIES + 1)], max_loaded=5,
                    calls=300)
    assert metrics["ModelLoads"]["reload"] > 0
