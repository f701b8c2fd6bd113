"""`conch deploy` runs `conch check` first: a hostile or broken archive is refused and nothing is uploaded."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import ROLE, Moto, spec
from hostile_archives import write_archive
from seed_archives import bert_repo, pack_repo
from test_cli_deploy import aws_args, conch

from conch.errors import DeployError
from conch.sagemaker.rollout import check_archives, deploy
from conch.sagemaker.s3 import ModelLocation

pytestmark = pytest.mark.integration


def test_deploy_refuses_failing_archives_and_uploads_nothing(moto: Moto, bucket: str, archives: list[Path],
                                                            tmp_path: Path) -> None:
    dist = archives[0].parent
    write_archive(dist / "escape.tar.gz", [("m/config.pbtxt", "symlink", "../../../etc/passwd")])
    repo = {k.replace("bert-trt", "bert;id"): v for k, v in bert_repo().items()}
    pack_repo(repo, dist / "shell.tar.gz")
    result = conch("deploy", str(dist), "--bucket", bucket, "--prefix", "mme", "--role", ROLE, *aws_args(moto))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "conch: error: refusing to deploy: 2 of 4 archives fail `conch check`" in result.stderr
    assert "escape.tar.gz fails `conch check`: archive: archive" in result.stderr
    assert "entry 'm/config.pbtxt' is a symlink to '../../../etc/passwd', which leaves" in result.stderr
    assert "shell.tar.gz fails `conch check`: bert;id/: model folder 'bert;id' is not a safe name" in result.stderr
    assert moto.client("s3").list_objects_v2(Bucket=bucket).get("KeyCount", 0) == 0
    assert not moto.client("sagemaker").list_endpoints()["Endpoints"]


def test_check_archives_passes_conch_builds(archives: list[Path], tmp_path: Path) -> None:
    check_archives(archives)
    broken = tmp_path / "broken.tar.gz"
    shutil.copy(archives[0], broken)
    broken.write_bytes(broken.read_bytes()[:100])
    with pytest.raises(DeployError, match="broken.tar.gz fails `conch check`: archive: archive .* truncated"):
        check_archives([*archives, broken])


def test_deploy_checks_the_archives_a_given_check_does_not_hold(moto: Moto, bucket: str, archives: list[Path],
                                                                tmp_path: Path) -> None:
    # A repository `conch check` refuses (a model folder named for a shell) that the fleet check reads as it is.
    unchecked = tmp_path / "unchecked.tar.gz"
    pack_repo({k.replace("bert-trt", "bert;id"): v for k, v in bert_repo().items()}, unchecked)
    location = ModelLocation(bucket, "stale-check")
    with pytest.raises(DeployError, match=r"(?s)refusing to deploy: 1 of 1 archives fail `conch check`.*"
                                          r"unchecked\.tar\.gz fails `conch check`: bert;id/"):
        deploy([*archives, unchecked], location, spec(model_data_url=location.model_data_url), moto.aws, poll=0.01,
               checked=check_archives(archives))
    assert moto.client("s3").list_objects_v2(Bucket=bucket, Prefix="stale-check").get("KeyCount", 0) == 0


def test_deploy_checks_again_an_archive_rewritten_since_its_check(moto: Moto, bucket: str, archives: list[Path],
                                                                   tmp_path: Path) -> None:
    # Checked while it was a good build, then replaced in place by a repository `conch check` refuses: the check
    # the caller holds is of other bytes, so deploy checks the file again and uploads nothing.
    rewritten = tmp_path / "rewritten.tar.gz"
    shutil.copy(archives[0], rewritten)
    stale = check_archives([rewritten])
    assert stale[rewritten].unchanged_since_check(rewritten)
    pack_repo({k.replace("bert-trt", "bert;id"): v for k, v in bert_repo().items()}, rewritten)
    assert not stale[rewritten].unchanged_since_check(rewritten)
    location = ModelLocation(bucket, "rewritten")
    with pytest.raises(DeployError, match=r"(?s)refusing to deploy: 1 of 1 archives fail `conch check`.*"
                                          r"rewritten\.tar\.gz fails `conch check`: bert;id/"):
        deploy([rewritten], location, spec(model_data_url=location.model_data_url), moto.aws, poll=0.01,
               checked=stale)
    assert moto.client("s3").list_objects_v2(Bucket=bucket, Prefix="rewritten").get("KeyCount", 0) == 0
