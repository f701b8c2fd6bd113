"""`conch deploy` of single-model archives made by hand (python_backend's add_sub layout, and a config.pbtxt at the
root), against moto's server on 127.0.0.1: checked, uploaded under their TargetModels, copies stamped."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import INSTANCE, ROLE, Moto
from seed_archives import pack_repo
from single_models import add_sub_repo

from conch.archive.fleet_check import archive_models

pytestmark = pytest.mark.integration


def conch(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "conch.cli", *args], capture_output=True, text=True, timeout=300)


def test_single_model_archives_deploy(moto: Moto, bucket: str, tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    dist.mkdir()
    pack_repo(add_sub_repo(), dist / "add_sub.tar.gz")
    pack_repo(add_sub_repo(""), dist / "root.tar.gz")
    done = conch("deploy", str(dist), "--bucket", bucket, "--prefix", "mme", "--role", ROLE, "--instance-type",
                 INSTANCE, "--copies", "2", "--endpoint", "single-mme", "--region", "us-east-1", "--endpoint-url",
                 moto.url)
    assert done.returncode == 0, done.stdout + done.stderr
    keys = sorted(o["Key"] for o in moto.client("s3").list_objects_v2(Bucket=bucket)["Contents"])
    assert len(keys) == 4 and all(k.startswith("mme/") for k in keys), keys
    s3 = moto.client("s3")
    for key in keys:  # each uploaded archive is still one model SageMaker serves as its TargetModel
        local = tmp_path / Path(key).name
        local.write_bytes(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
        assert archive_models(local).single in ("add_sub", "model"), key


def test_an_archive_without_a_manifest_is_made_by_hand_and_a_broken_one_refused(tmp_path: Path) -> None:
    from conch.errors import DeployError
    from conch.sagemaker.runtime import built_manifest

    assert built_manifest(pack_repo(add_sub_repo(), tmp_path / "hand.tar.gz")) is None
    broken = pack_repo({**add_sub_repo(), "conch-manifest.json": b"{oops"}, tmp_path / "broken.tar.gz")
    with pytest.raises(DeployError, match=r"broken.tar.gz: .*broken.tar.gz: its conch-manifest.json is not JSON"):
        built_manifest(broken)
    with pytest.raises(DeployError, match=r"gone.tar.gz: no such archive"):
        built_manifest(tmp_path / "gone.tar.gz")
