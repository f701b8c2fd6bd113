"""Replaying on the local tritonserver when an archive cannot be replayed or an answer does not come: the
row or error names the archive, the TargetModel or the answer, and what to do."""

from __future__ import annotations

import io
import shutil
import tarfile
from pathlib import Path

import numpy as np
import pytest
import slow_steps
from conftest import linear_ensemble
from test_local_replay import one_step

from conch import ServeError
from conch.builder.repository_build import build_ensemble
from conch.replays.local_replay import replay_archives, stage
from conch.triton.mme import InvokeError, MultiModelClient, parse_binary_response
from conch.triton.server import LocalTriton

pytestmark = pytest.mark.integration


def test_two_archives_of_one_name_replay_the_first_and_refuse_the_second(tmp_path: Path, triton: LocalTriton) -> None:
    first = build_ensemble(linear_ensemble("twice_named"), tmp_path / "a", "local")
    second = tmp_path / "b" / first.name
    second.parent.mkdir()
    shutil.copyfile(first, second)
    report = replay_archives([first, second], server=triton)
    (refused,) = [r for r in report.rows if not r.passed]
    assert refused.endpoint == "check"
    assert refused.detail == ("twice_named.tar.gz is given twice (or two archives share its name); each TargetModel "
                              "is loaded once: rename one of them")
    assert any(r.passed and r.endpoint == "kserve" for r in report.rows)


def test_an_archive_that_fails_conch_check_is_not_loaded(tmp_path: Path, triton: LocalTriton) -> None:
    archive = tmp_path / "misnamed.tar.gz"
    config = b'name: "another_name"\nbackend: "python"\n'
    with tarfile.open(archive, "w:gz") as tar:
        info = tarfile.TarInfo("misnamed/config.pbtxt")
        info.size = len(config)
        tar.addfile(info, io.BytesIO(config))
    report = replay_archives([archive], server=triton)
    (row,) = report.rows
    assert not row.passed and row.endpoint == "check"
    # a single-model archive: its config's name need not be its folder's (the front end maps it to the
    # TargetModel), but Triton loads nothing from a model without a version folder
    assert row.detail == ("misnamed.tar.gz fails `conch check`: misnamed/: has no version folder Triton loads under "
                          "its version_policy (Triton: 'at least one version must be available under the version "
                          "policy'); found no version folders: add 1/ or make the policy name one")


def test_an_answer_slower_than_the_request_timeout_names_the_target_model(tmp_path: Path,
                                                                         triton: LocalTriton) -> None:
    archive = build_ensemble(one_step("slow_answer", slow_steps.SlowAnswer), tmp_path, "local")
    client = MultiModelClient(triton.sagemaker_url, triton.http_url, request_timeout=2)
    client.load(archive.name, stage(archive, triton), timeout=120)
    with pytest.raises(InvokeError, match=r"'slow_answer.tar.gz' did not answer within 2 s"):
        client.invoke_json(archive.name, {"X": np.ones((1, 4), np.float32)})
    with pytest.raises(InvokeError, match=r"'slow_answer.tar.gz' did not answer within 2 s"):  # over KServe too
        client.invoke_kserve(archive.name, {"X": np.ones((1, 4), np.float32)})


def test_an_answer_that_is_not_kserve_shows_what_came_instead() -> None:
    """e.g. a proxy in front of the endpoint answering with its own page."""
    with pytest.raises(ServeError, match=r"the answer \(text/html\) is not a KServe v2 inference response "
                                         r"\(.*\): '<html>502 Bad Gateway</html>'"):
        parse_binary_response(b"<html>502 Bad Gateway</html>", "text/html")
