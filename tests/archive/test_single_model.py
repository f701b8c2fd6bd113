"""`conch check` of single-model archives (one model folder at the root, or a config.pbtxt at the root), packed as
SageMaker takes them, and of unpacked model repository folders checked as the archive they would become. What
SageMaker's front end does with each shape (server src/sagemaker_server.cc's folder scan) was confirmed on the
real tritonserver 2.51: tests/replays/test_single_model_replay.py loads and answers every shape passed here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from seed_archives import pack_repo
from single_models import add_sub_repo, simple_repo, write_repo

from conch.archive.fleet_check import archive_models, check_archive_models, check_fleet, check_repository_models
from conch.archive.verify import check_repository


@pytest.mark.parametrize(("repo", "served", "kind"), [
    (add_sub_repo(), "add_sub", "python"),
    (simple_repo(), "simple", "onnxruntime_onnx"),
    (add_sub_repo(""), "model", "python"),  # the root is the model: SageMaker unpacks into .../<hash>/model
], ids=["add_sub", "simple", "root-config"])
def test_single_model_archives_pass(tmp_path: Path, repo: dict[str, bytes | None], served: str, kind: str) -> None:
    report = check_archive_models(pack_repo(repo, tmp_path / "m.tar.gz"))[0]
    assert report.lines() == [f"m.tar.gz: ok: single model {served!r} ({kind}), served as the TargetModel"]
    assert report.single == served and report.served == served and report.ensemble is None


def test_the_served_models_name_may_differ_from_its_folder(tmp_path: Path) -> None:
    """Triton loads the served folder under the TargetModel (a model mapping) and renames it: no name rule."""
    repo = {k.replace("add_sub/", "v2/"): v for k, v in add_sub_repo().items()}
    assert check_archive_models(pack_repo(repo, tmp_path / "m.tar.gz"))[0].ok


def test_the_model_files_of_a_single_model_are_checked(tmp_path: Path) -> None:
    repo = {k: v for k, v in simple_repo().items() if not k.endswith("model.onnx")} | {"simple/1": None}
    lines = check_archive_models(pack_repo(repo, tmp_path / "m.tar.gz"))[0].lines()
    assert lines == ["m.tar.gz/simple/1/: error: lacks model.onnx, the model file onnxruntime_onnx loads"]
    root = {k: v for k, v in add_sub_repo("").items() if k != "1/model.py"} | {"1": None}
    lines = check_archive_models(pack_repo(root, tmp_path / "r.tar.gz"))[0].lines()
    assert lines == ["r.tar.gz/1/: error: lacks model.py, the model file python loads"]


def test_a_model_folder_beside_another_folder_is_refused(tmp_path: Path) -> None:
    """Without an ensemble the front end serves the folder it lists last, which may be the one with no model."""
    repo = {**add_sub_repo(), "conch-envs/env.tar.gz": b"x"}
    text = "\n".join(check_archive_models(pack_repo(repo, tmp_path / "m.tar.gz"))[0].lines())
    assert text == ("m.tar.gz: error: holds model folder add_sub and 1 other folder(s) at its root (conch-envs) and "
                    "no ensemble: SageMaker's front end serves whichever folder it lists last, which may be one "
                    "without a model; move conch-envs into add_sub/ so the archive holds one folder (a single-model "
                    "archive)")


def test_two_models_without_an_ensemble_are_refused(tmp_path: Path) -> None:
    repo = {**add_sub_repo(), **simple_repo()}
    text = "\n".join(check_archive_models(pack_repo(repo, tmp_path / "m.tar.gz"))[0].lines())
    assert ("no model folder holds an ensemble config (platform: \"ensemble\"); SageMaker would serve whichever "
            "folder it lists last; add the ensemble's folder with its config.pbtxt and 1/, or pack one model folder "
            "per archive (a single-model archive)") in text


def test_an_archive_without_a_model_folder_is_refused(tmp_path: Path) -> None:
    text = "\n".join(check_archive_models(pack_repo({"notes/readme.txt": b"x"}, tmp_path / "m.tar.gz"))[0].lines())
    assert text == ("m.tar.gz: error: holds no model folder (a folder with a config.pbtxt, or a Python model's "
                    "<version>/model.py that Triton auto-completes) at its root; put the model's folder (config.pbtxt "
                    "and 1/) at the archive root")


def test_a_root_config_hides_the_model_folders_beside_it(tmp_path: Path) -> None:
    repo = {**add_sub_repo(""), **simple_repo()}
    lines = check_archive_models(pack_repo(repo, tmp_path / "m.tar.gz"))[0].lines()
    assert lines[0] == ("m.tar.gz/config.pbtxt: warning: makes SageMaker load the archive as one model, so the model "
                        "folder(s) simple at the root are not loaded; to serve an ensemble of them, remove the "
                        "config.pbtxt at the root")
    assert lines[-1].endswith("ok: single model 'model' (python), served as the TargetModel")


def test_an_ensemble_at_the_root_is_refused(tmp_path: Path) -> None:
    config = b'name: "e"\nplatform: "ensemble"\ninput [ { name: "A" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
    report = check_archive_models(pack_repo({"config.pbtxt": config, "1": None}, tmp_path / "m.tar.gz"))[0]
    text = "\n".join(report.lines())
    assert ("m.tar.gz/config.pbtxt: error: is an ensemble at the archive root: its steps would have to be folders "
            "beside it, but the root is this model's own folder; put the ensemble in a folder of its own (with 1/) "
            "beside its steps' folders") in text


def test_single_models_share_an_endpoint_whatever_their_folder_names(tmp_path: Path) -> None:
    """Each is served under its TargetModel, and Triton skips a mapped folder when it looks up a step by name:
    two copies of one model folder are no collision (seed 000 copies one BERT under 200 names)."""
    fleet = []
    for name in ("a", "b"):
        archive = pack_repo(add_sub_repo(), tmp_path / f"{name}.tar.gz")
        report, models = check_archive_models(archive)
        assert report.ok and models is not None and models.single == "add_sub"
        assert models == archive_models(archive)  # the stream's reading agrees with the check's
        fleet.append(models)
    root = pack_repo(add_sub_repo(""), tmp_path / "root.tar.gz")
    assert archive_models(root).single == "model" and check_archive_models(root)[1] == archive_models(root)
    report = check_fleet([*fleet, archive_models(root)])
    assert report.lines() == ["fleet: ok: 3 archives can share one endpoint"]


def test_a_model_repository_folder_is_checked_as_its_archive(tmp_path: Path) -> None:
    folder = write_repo(add_sub_repo(), tmp_path / "model_repository")
    report, models = check_repository_models(folder)
    assert report.lines() == ["model_repository: ok: single model 'add_sub' (python), served as the TargetModel"]
    assert models is not None and models.target_model == "model_repository.tar.gz"


def test_a_link_out_of_a_repository_folder_is_refused(tmp_path: Path) -> None:
    folder = write_repo(add_sub_repo(), tmp_path / "repo")
    (tmp_path / "weights.bin").write_bytes(b"w")
    os.symlink(tmp_path / "weights.bin", folder / "add_sub" / "1" / "weights.bin")
    text = "\n".join(check_repository(folder).lines())
    assert (f"repo/add_sub/1/weights.bin: error: is a symlink to '{tmp_path / 'weights.bin'}', outside the folder: "
            "safe unpacking (conch's, and a link that lands nowhere on SageMaker) refuses it; copy the file in") in text


def conch(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "conch.cli", *args], capture_output=True, text=True, timeout=300,
                          cwd=cwd)


def test_conch_check_takes_model_repository_folders(tmp_path: Path) -> None:
    write_repo(add_sub_repo(), tmp_path / "model_repository")
    write_repo(add_sub_repo(""), tmp_path / "add_sub")
    write_repo(simple_repo(), tmp_path / "simple")
    (tmp_path / "empty").mkdir()
    done = conch(tmp_path, "check", "model_repository", "add_sub", "simple", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    document = json.loads(done.stdout)
    assert [(a["archive"], a["single"]) for a in document["archives"]] == [
        ("model_repository", "add_sub"), ("add_sub", "model"), ("simple", "simple")]
    assert document["fleet"]["ok"]
    done = conch(tmp_path, "check", "empty")
    assert done.returncode == 2
    assert ("no .tar.gz archives in empty; give archive files, folders of them, an unpacked model repository "
            "(folders with config.pbtxt) or an s3://bucket/prefix holding archives") in done.stdout + done.stderr


def test_a_single_model_travels_in_the_s3_summary(tmp_path: Path) -> None:
    from conch.archive.fleet_check import ArchiveModels

    models = archive_models(pack_repo(add_sub_repo(), tmp_path / "m.tar.gz"))
    assert '"single":"add_sub"' in models.summary()
    assert ArchiveModels.from_summary("m.tar.gz", models.summary()) == models
