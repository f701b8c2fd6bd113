"""`conch deploy` stamps: one archive under many names (--copies, --as), a version whose step names are taken
under the prefix, the fleet check over the prefix plus the uploads, and `conch check s3://…`; against moto's S3
on 127.0.0.1 through boto3."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROLE, Moto, linear_ensemble, spec

from conch import DeployError
from conch.archive.fleet_check import ArchiveModels, read_archive_models
from conch.builder.repository_build import build_ensemble
from conch.builder.stamping import stamped_name
from conch.sagemaker.rollout import deploy
from conch.sagemaker.s3 import FLEET_METADATA, ModelLocation, remote_archives

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_ensemble(linear_ensemble("x"), tmp_path_factory.mktemp("built"), "production")


def conch(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "conch.cli", *args], capture_output=True, text=True, timeout=300)


def uploaded(moto: Moto, bucket: str, key: str) -> tuple[set[str], str | None]:
    """The model folders of the archive at ``key`` and the TargetModel its manifest's stamp names."""
    body = moto.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read()
    models = read_archive_models(io.BytesIO(body), key)
    return {*models.ensembles, *models.models}, models.stamped_for


def test_copies_go_up_stamped_and_a_second_deploy_changes_nothing(moto: Moto, bucket: str, built: Path) -> None:
    location = ModelLocation(bucket, "copies")
    done = deploy([built], location, spec(model_data_url=location.model_data_url), moto.aws, poll=0.01, copies=3)
    assert [u.target_model for u in done.uploads] == ["x-1.tar.gz", "x-2.tar.gz", "x-3.tar.gz"]
    assert all(u.archive == built and u.stamped == "--copies" and u.action == "uploaded" for u in done.uploads)
    (race,) = [w for w in done.warnings if "unknown model" in w]
    assert race.startswith("with 3 TargetModels, release 24.10: its SageMaker front end reads the TargetModel list "
                           "unlocked during loads and unloads (fixed in 25.12, server 2.64.0)")
    assert "can get 'unknown model' (ModelError 400) on every release so far" in race
    for upload in done.uploads:
        folders, stamp = uploaded(moto, bucket, f"copies/{upload.target_model}")
        assert stamp == upload.target_model
        assert folders == {"x", stamped_name("x__double", upload.target_model),
                           stamped_name("x__add_one", upload.target_model)}
    again = deploy([built], location, spec(model_data_url=location.model_data_url), moto.aws, poll=0.01, copies=3)
    assert [u.action for u in again.uploads] == ["unchanged"] * 3  # stamps are byte-identical
    check = conch("check", f"s3://{bucket}/copies", "--s3-endpoint-url", moto.url)
    assert check.returncode == 0, check.stderr
    assert "fleet: ok: 3 archives can share one endpoint" in check.stdout


def test_a_version_whose_step_names_are_taken_is_stamped_and_check_names_raw_copies(
        moto: Moto, bucket: str, built: Path, tmp_path: Path) -> None:
    s3 = moto.client("s3")
    for name in ("x-v1.tar.gz", "x-raw.tar.gz"):  # uploaded by hand, as built: the same step names
        s3.put_object(Bucket=bucket, Key=f"versions/{name}", Body=built.read_bytes())
    check = conch("check", f"s3://{bucket}/versions", "--s3-endpoint-url", moto.url, "--json", "--quiet")
    assert check.returncode == 1
    assert ("conch: error: fleet: x-raw.tar.gz, x-v1.tar.gz both hold step models x__add_one, x__double"
            in check.stderr)
    fleet = remote_archives(ModelLocation(bucket, "versions"), moto.aws)
    assert [a.target_model for a in fleet] == ["x-raw.tar.gz", "x-v1.tar.gz"] and fleet[0].models == fleet[1].models
    assert len(moto.called("GetObject")) == 1  # uploaded raw (no conch metadata), one ETag: streamed once
    s3.delete_object(Bucket=bucket, Key="versions/x-raw.tar.gz")
    v2 = tmp_path / "x-v2.tar.gz"
    v2.write_bytes(built.read_bytes())
    location = ModelLocation(bucket, "versions")
    done = deploy([v2], location, spec(model_data_url=location.model_data_url), moto.aws, poll=0.01)
    (upload,) = done.uploads
    assert upload.stamped == "step models x__add_one, x__double already used by x-v1.tar.gz"
    assert uploaded(moto, bucket, "versions/x-v2.tar.gz")[1] == "x-v2.tar.gz"
    result = conch("check", f"s3://{bucket}/versions", "--s3-endpoint-url", moto.url)
    assert result.returncode == 0, result.stderr
    reads = len(moto.called("GetObject"))
    fleet = remote_archives(location, moto.aws)
    assert [(a.target_model, a.stamped_for) for a in fleet] == [("x-v1.tar.gz", None), ("x-v2.tar.gz", "x-v2.tar.gz")]
    assert len(moto.called("GetObject")) == reads + 1  # x-v1 (raw) streamed; x-v2 read from conch's metadata


def test_dry_run_shows_the_stamps_and_uploads_nothing(moto: Moto, bucket: str, built: Path) -> None:
    result = conch("deploy", str(built), "--as", "x-a", "--as", "x-b", "--dry-run", "--bucket", bucket, "--prefix",
                   "dry", "--role", ROLE, "--endpoint", "text-mme", "--region", "us-east-1")
    assert result.returncode == 0, result.stderr
    assert "would stamp x.tar.gz as x-a.tar.gz (--as): step names x__add_one -> x__add_one__t" in result.stdout
    assert "would stamp x.tar.gz as x-b.tar.gz (--as)" in result.stdout
    assert "s3 ListObjectsV2" in result.stdout and '"Key": "dry/x-b.tar.gz"' in result.stdout
    assert moto.client("s3").list_objects_v2(Bucket=bucket, Prefix="dry").get("KeyCount", 0) == 0


def test_the_deploy_refuses_what_the_endpoint_could_not_serve(moto: Moto, bucket: str, built: Path,
                                                              tmp_path: Path) -> None:
    older = build_ensemble(linear_ensemble("old"), tmp_path, "production", "24.05")
    moto.client("s3").put_object(Bucket=bucket, Key="mixed/old.tar.gz", Body=older.read_bytes())
    location = ModelLocation(bucket, "mixed")
    with pytest.raises(DeployError, match=r"refusing to deploy: with what is under s3://conch-models/mixed/ already, "
                       r"the endpoint could not serve the uploads:\n  the archives were built for different Triton "
                       r"releases \(24.05: old.tar.gz; 24.10: x.tar.gz\)"):
        deploy([built], location, spec(model_data_url=location.model_data_url), moto.aws, poll=0.01)
    with pytest.raises(DeployError, match=r"give --as NAME .* or --copies N .*, not both"):
        deploy([built], location, spec(model_data_url=location.model_data_url), moto.aws, names=["a"], copies=2)
    assert not moto.called("PutObject") and not moto.called("CreateModel")


def test_names_and_prefixes_are_checked_before_anything_is_read(built: Path, tmp_path: Path) -> None:
    from conch.sagemaker.upload_plan import requested

    assert requested([built], copies=3) == [(built, f"x-{i}.tar.gz", "--copies") for i in (1, 2, 3)]
    assert requested([built], ["a", "b.tar.gz"]) == [(built, "a.tar.gz", "--as"), (built, "b.tar.gz", "--as")]
    with pytest.raises(DeployError, match=r"--as names copies of one archive, but 2 were given"):
        requested([built, tmp_path / "y.tar.gz"], ["a"])
    with pytest.raises(DeployError, match=r"--copies -1: give a number of copies of at least 1"):
        requested([built], copies=-1)
    with pytest.raises(DeployError, match=r"'bucket/mme': give an S3 prefix as s3://bucket/prefix"):
        ModelLocation.parse("bucket/mme")
    assert ModelLocation.parse("s3://bucket/mme/") == ModelLocation("bucket", "mme")


def test_a_deploy_reads_each_file_it_uploads_once_for_the_fleet_check_and_its_metadata(
        moto: Moto, bucket: str, built: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import conch.sagemaker.s3 as s3_module
    import conch.sagemaker.upload_plan as plan_module
    from conch.archive.fleet_check import archive_models

    read: list[str] = []

    def counted(path: Path, target_model: str | None = None) -> ArchiveModels:
        read.append(Path(path).name)
        return archive_models(path, target_model)

    for module in (plan_module, s3_module):
        monkeypatch.setattr(module, "archive_models", counted)
    location = ModelLocation(bucket, "read-once")
    done = deploy([built], location, spec(model_data_url=location.model_data_url), moto.aws, poll=0.01, copies=2)
    assert [u.action for u in done.uploads] == ["uploaded", "uploaded"]
    # each stamped copy once; the archive as built not at all (every copy of it is stamped)
    assert sorted(read) == ["x-1.tar.gz", "x-2.tar.gz"]
    s3 = moto.client("s3")
    for upload in done.uploads:
        key = f"read-once/{upload.target_model}"
        recorded = s3.head_object(Bucket=bucket, Key=key)["Metadata"][FLEET_METADATA]
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        assert recorded == read_archive_models(io.BytesIO(body), key).summary()
