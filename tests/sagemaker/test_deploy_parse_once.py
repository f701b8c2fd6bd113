"""`conch deploy` parses each config.pbtxt of each archive once (counted as tests/archive/test_parse_once.py
counts): the check's parsed configs are what the upload plan, the fleet check and the upload's metadata go on
with; against moto's S3 on 127.0.0.1. (An archive that goes up stamped is unpacked and checked again by the
stamp, builder/stamping.Unpacked, and each stamped copy is read once for its metadata: new texts.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from config_parses import counted, once_each
from conftest import INSTANCE, ROLE, Moto, linear_ensemble, spec

from conch.builder.repository_build import build_ensemble
from conch.cli import main
from conch.sagemaker.rollout import deploy
from conch.sagemaker.s3 import ModelLocation

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    out = tmp_path_factory.mktemp("built")
    return [build_ensemble(linear_ensemble(name), out, "production") for name in ("once_a", "once_b")]


def test_a_deploy_parses_each_config_of_each_archive_once(moto: Moto, bucket: str, built: list[Path],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    location = ModelLocation(bucket, "parsed-once")
    with counted(monkeypatch, *built) as parses:
        done = deploy(built, location, spec(model_data_url=location.model_data_url), moto.aws, poll=0.01)
    assert [u.action for u in done.uploads] == ["uploaded", "uploaded"]
    assert parses == once_each(*built)


def test_the_deploy_command_parses_each_config_of_each_archive_once(
        moto: Moto, bucket: str, built: list[Path], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    with counted(monkeypatch, *built) as parses:
        status = main(["deploy", *map(str, built), "--bucket", bucket, "--prefix", "cli-once", "--role", ROLE,
                       "--instance-type", INSTANCE, "--endpoint", "once-mme", "--region", "us-east-1",
                       "--endpoint-url", moto.url, "--no-wait"])
    assert status == 0, capsys.readouterr().err
    assert parses == once_each(*built)

