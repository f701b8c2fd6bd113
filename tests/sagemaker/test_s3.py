"""Uploading archives to S3 (moto's server on 127.0.0.1): keys, sha256 metadata, skips, parts, errors."""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import basic_steps
import httpx
import numpy as np
import pytest
from conftest import REGION, Moto, linear_ensemble

from conch import DeployError, Ensemble, PythonStep, Tensor
from conch.aws import AwsTarget
from conch.builder.repository_build import build_ensemble
from conch.sagemaker.s3 import FLEET_METADATA, SHA256_METADATA, ModelLocation, upload_archives

pytestmark = pytest.mark.integration


def test_each_archive_lands_under_the_prefix_with_its_sha256(moto: Moto, bucket: str, archives: list[Path]) -> None:
    location = ModelLocation(bucket, "/mme/v1/")
    uploads = upload_archives(archives, location, moto.aws)
    assert [u.action for u in uploads] == ["uploaded", "uploaded"]
    assert location.model_data_url == "s3://conch-models/mme/v1/"
    s3 = moto.client("s3")
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"])
    assert keys == ["mme/v1/linear_a.tar.gz", "mme/v1/linear_b.tar.gz"]
    for archive, upload in zip(archives, uploads, strict=True):
        assert upload.target_model == archive.name  # the key relative to the prefix
        assert upload.url == f"s3://conch-models/mme/v1/{archive.name}"
        head = s3.head_object(Bucket=bucket, Key=f"mme/v1/{archive.name}")
        stem = archive.name.removesuffix(".tar.gz")
        assert head["Metadata"] == {SHA256_METADATA: hashlib.sha256(archive.read_bytes()).hexdigest(),
                                    FLEET_METADATA: json.dumps({  # what the fleet check reads with one HEAD
                                        "ensembles": [stem], "models": [f"{stem}__add_one", f"{stem}__double"],
                                        "release": "24.10", "stamped_for": None,
                                        "steps": [f"{stem}__add_one", f"{stem}__double"], "v": 1},
                                        separators=(",", ":"))}
        body = s3.get_object(Bucket=bucket, Key=f"mme/v1/{archive.name}")["Body"].read()
        assert body == archive.read_bytes()


def test_unchanged_archives_are_skipped_and_changed_ones_replaced(
    moto: Moto, bucket: str, archives: list[Path]
) -> None:
    location = ModelLocation(bucket, "mme")
    upload_archives(archives, location, moto.aws)
    moto.calls.clear()
    again = upload_archives(archives, location, moto.aws)
    assert [u.action for u in again] == ["unchanged", "unchanged"]
    assert not moto.called("PutObject") and not moto.called("CreateMultipartUpload")

    changed = linear_ensemble("linear_a")
    changed.samples[0].expected = {"Z": np.zeros((2, 4), np.float32)}
    rebuilt = build_ensemble(changed, archives[0].parent, "production")
    result = upload_archives([rebuilt, archives[1]], location, moto.aws)
    assert [u.action for u in result] == ["replaced", "unchanged"]
    head = moto.client("s3").head_object(Bucket=bucket, Key="mme/linear_a.tar.gz")
    assert head["Metadata"][SHA256_METADATA] == hashlib.sha256(rebuilt.read_bytes()).hexdigest()


def with_weights(name: str, tmp_path: Path, size: int) -> Ensemble:
    """X -> double -> Y, with a file of ``size`` random bytes next to the step's code."""
    blob = tmp_path / f"{name}-{size}.bin"
    blob.write_bytes(os.urandom(size))
    ens = Ensemble(name, max_batch_size=4)
    step = PythonStep("double", basic_steps.double, inputs=[Tensor("x", "FP32", [4])],
                      outputs=[Tensor("y", "FP32", [4])],
                      files={"weights.bin": blob}, max_batch_size=4)
    ens.output("Y", step(ens.input("X", "FP32", [4])))
    ens.sample("ones", {"X": np.ones((1, 4), np.float32)}, {"Y": np.full((1, 4), 2, np.float32)})
    return ens


def test_a_large_archive_goes_up_in_parts(moto: Moto, bucket: str, tmp_path: Path) -> None:
    archive = build_ensemble(with_weights("big", tmp_path, 12 << 20), tmp_path / "dist", "production")
    assert archive.stat().st_size > 12 << 20  # random bytes do not compress

    (upload,) = upload_archives([archive], ModelLocation(bucket, "mme"), moto.aws,
                                multipart_threshold=5 * 1024 * 1024, multipart_chunk=5 * 1024 * 1024)
    assert upload.action == "uploaded"
    assert len(moto.called("UploadPart")) == 3 and len(moto.called("CompleteMultipartUpload")) == 1
    s3 = moto.client("s3")
    head = s3.head_object(Bucket=bucket, Key="mme/big.tar.gz")
    assert head["ETag"].strip('"').endswith("-3")  # S3's multipart ETag: <md5 of part md5s>-<parts>
    assert head["Metadata"][SHA256_METADATA] == hashlib.sha256(archive.read_bytes()).hexdigest()
    assert s3.get_object(Bucket=bucket, Key="mme/big.tar.gz")["Body"].read() == archive.read_bytes()
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def test_a_missing_bucket_is_named_with_how_to_create_it(moto: Moto, archives: list[Path]) -> None:
    with pytest.raises(DeployError, match=r"S3 bucket 'no-such-bucket' does not exist \(region us-east-1\); "
                       r"create it \(aws s3 mb s3://no-such-bucket --region us-east-1\)"):
        upload_archives(archives, ModelLocation("no-such-bucket", "mme"), moto.aws)


def test_a_bucket_in_another_region_is_refused(moto: Moto, archives: list[Path]) -> None:
    moto.client("s3").create_bucket(Bucket="eu-models", CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
    with pytest.raises(DeployError, match="'eu-models' is in eu-west-1 but the endpoint is in us-east-1"):
        upload_archives(archives, ModelLocation("eu-models"), moto.aws)


def test_bad_names_are_refused_before_any_call(moto: Moto, bucket: str, tmp_path: Path) -> None:
    with pytest.raises(DeployError, match="give the bucket name alone"):
        ModelLocation("s3://conch-models/mme")
    text = tmp_path / "notes.txt"
    text.write_text("x")
    with pytest.raises(DeployError, match=r"notes.txt: an MME serves .tar.gz archives"):
        upload_archives([text], ModelLocation(bucket), moto.aws)
    assert moto.calls == []


@pytest.fixture
def iam_enforced(moto: Moto) -> Iterator[None]:
    """moto checks signatures and IAM policies from here on (off again afterwards)."""
    httpx.post(f"{moto.url}/moto-api/reset-auth", content=b"0", timeout=10).raise_for_status()
    try:
        yield
    finally:
        httpx.post(f"{moto.url}/moto-api/reset-auth", content=b"inf", timeout=10).raise_for_status()


def _user(moto: Moto, name: str, allow: list[str], deny: tuple[str, ...] = ()) -> tuple[str, str]:
    iam = moto.client("iam")
    iam.create_user(UserName=name)
    statements = [{"Effect": "Allow", "Action": allow, "Resource": "*"}]
    if deny:
        statements.append({"Effect": "Deny", "Action": list(deny), "Resource": "*"})
    policy = {"Version": "2012-10-17", "Statement": statements}
    iam.put_user_policy(UserName=name, PolicyName="only", PolicyDocument=json.dumps(policy))
    key = iam.create_access_key(UserName=name)["AccessKey"]
    return key["AccessKeyId"], key["SecretAccessKey"]


def test_access_denied_names_the_bucket_and_key(
    moto: Moto, bucket: str, archives: list[Path], monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    reader = _user(moto, "reader", ["s3:*"], deny=("s3:PutObject",))  # may look, may not write
    nobody = _user(moto, "nobody", ["sagemaker:DescribeEndpoint"])
    monkeypatch.delenv("AWS_SESSION_TOKEN")
    request.getfixturevalue("iam_enforced")
    aws = AwsTarget(REGION, moto.url)

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", reader[0])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", reader[1])
    with pytest.raises(DeployError) as denied:
        upload_archives(archives, ModelLocation(bucket, "mme"), aws)
    assert "uploading linear_a.tar.gz to s3://conch-models/mme/linear_a.tar.gz" in str(denied.value)
    assert "s3:PutObject on arn:aws:s3:::conch-models/mme/linear_a.tar.gz" in str(denied.value)

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", nobody[0])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", nobody[1])
    with pytest.raises(DeployError, match=r"access denied to S3 bucket 'conch-models': the credentials in use need "
                       r"s3:ListBucket on arn:aws:s3:::conch-models"):
        upload_archives(archives, ModelLocation(bucket, "mme"), aws)


def test_a_failed_upload_leaves_the_previous_archive_and_no_parts(
    moto: Moto, bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    location = ModelLocation(bucket, "mme")
    small = build_ensemble(with_weights("grows", tmp_path, 1024), tmp_path / "v1", "production")
    upload_archives([small], location, moto.aws)
    big = build_ensemble(with_weights("grows", tmp_path, 11 << 20), tmp_path / "v2", "production")

    patched = AwsTarget.client

    def failing_client(self: AwsTarget, service: str, **kwargs: object) -> object:
        client = patched(self, service, **kwargs)
        parts: list[int] = []

        def fail_second_part(**_: object) -> None:
            from botocore.exceptions import ClientError

            parts.append(1)
            if len(parts) == 2:  # the connection drops in the middle of the upload
                raise ClientError({"Error": {"Code": "InternalError", "Message": "injected"}}, "UploadPart")

        client.meta.events.register("before-call.s3.UploadPart", fail_second_part)
        return client

    monkeypatch.setattr(AwsTarget, "client", failing_client)
    with pytest.raises(DeployError, match="uploading grows.tar.gz to s3://conch-models/mme/grows.tar.gz failed"):
        upload_archives([big], location, moto.aws, multipart_threshold=5 << 20, multipart_chunk=5 << 20)
    s3 = moto.client("s3")
    assert moto.called("AbortMultipartUpload")
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    assert s3.get_object(Bucket=bucket, Key="mme/grows.tar.gz")["Body"].read() == small.read_bytes()


def test_a_prefix_with_an_empty_folder_and_missing_archives_are_refused(tmp_path: Path) -> None:
    with pytest.raises(DeployError, match=r"prefix 'a//b' has an empty folder \('//'\); SageMaker would not find"):
        ModelLocation("conch-models", "/a//b/")
    with pytest.raises(DeployError, match=r"absent.tar.gz: no such archive"):
        upload_archives([tmp_path / "absent.tar.gz"], ModelLocation("conch-models", "mme"), AwsTarget(REGION))


@pytest.mark.parametrize("url", ["localhost:9000", "127.0.0.1:5000", "ftp://127.0.0.1:21", "http://"])
def test_an_endpoint_url_boto3_would_refuse_is_one_line_naming_it(
        url: str, capsys: pytest.CaptureFixture[str]) -> None:
    from conch.cli import main

    with pytest.raises(DeployError, match=re.escape(f"endpoint URL {url!r}: give it with its scheme and host, e.g. "
                                                    "http://127.0.0.1:5000")):
        AwsTarget(REGION, url)
    # what the command line printed before was boto3's bare ValueError as "a conch bug"
    assert main(["check", "s3://conch-models/mme", "--s3-endpoint-url", url, "--region", REGION]) == 2
    err = capsys.readouterr().err
    assert err.strip() == (f"conch: error: endpoint URL {url!r}: give it with its scheme and host, e.g. "
                           "http://127.0.0.1:5000")
