"""`conch check --release YY.MM`: what an archive meets on that release's image (the stub's Python against a packed
environment's, TensorFlow gone from 25.03, bin/activate no longer run from 25.08, config fields the release does
not know), and on an archive built for another release, the upgrade check."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from conftest import linear_ensemble
from load_rule_cases import cases
from seed_archives import bert_repo, inception_repo, pack_repo

from conch.archive.fleet_check import check_archive_models
from conch.archive.release_check import env_python
from conch.archive.verify import check_folder
from conch.builder.repository_build import build_ensemble
from conch.errors import BuildError

ROOT = Path(__file__).resolve().parents[2]


def lines(archive: Path, release: str | None) -> list[str]:
    return check_archive_models(archive, release)[0].lines()


def text(archive: Path, release: str) -> str:
    return "\n".join(lines(archive, release))


def test_a_packed_environment_is_judged_against_the_stub_of_the_release(tmp_path: Path) -> None:
    archive = pack_repo(bert_repo(), tmp_path / "bert.tar.gz")  # its environment is Python 3.10
    assert check_archive_models(archive, "24.10")[0].ok
    found = text(archive, "26.05")
    assert ("bert.tar.gz/preprocess/config.pbtxt: error: its environment preprocess/processing_env.tar.gz is for "
            "Python 3.10, but the Python-backend stub of Triton 26.05 runs Python 3.12 and cannot load it: rebuild "
            "with `conch build --release 26.05` (or pack the environment with Python 3.12)") in found
    assert ("bert.tar.gz/preprocess/processing_env.tar.gz: warning: on Triton 26.05 the Python backend no longer runs "
            "the environment's bin/activate (from 25.08): it sets only VIRTUAL_ENV, PATH and LD_LIBRARY_PATH, so "
            "anything else the script (or conda's etc/conda/activate.d) sets is missing; set it in model.py "
            "instead") in found
    assert not any("bin/activate" in line for line in lines(archive, "24.11"))  # 3.12 already, activate still run


def test_tensorflow_models_are_refused_from_25_03(tmp_path: Path) -> None:
    archive = pack_repo(inception_repo(), tmp_path / "inception.tar.gz")
    assert check_archive_models(archive, "25.02")[0].ok
    assert ("inception.tar.gz/inception_graphdef/config.pbtxt: error: runs on the TensorFlow backend, which Triton "
            "25.03 does not ship (gone from 25.03): serve it on a 25.02 or older image, or convert the model (e.g. to "
            "ONNX)") in text(archive, "25.03")


def test_a_field_the_release_does_not_know_is_refused_there(tmp_path: Path) -> None:
    """load_rule_cases' field_newer_than_release: tritonserver 2.51 (24.10) cannot parse it; 25.11 has the field."""
    case = next(c for c in cases() if c.id == "field_newer_than_release")
    folder = case.write(tmp_path)
    assert check_folder(folder, case.id, "25.11").ok
    assert any("sets max_inflight_requests (ModelEnsembling.max_inflight_requests), which Triton 25.10 does not know "
               "(its ModelConfig has it from 25.11) and so refuses to parse; remove it or target 25.11 or later" in line
               for line in check_folder(folder, case.id, "25.10").lines())


def test_an_archive_built_for_24_10_checked_for_26_05_says_so(tmp_path: Path) -> None:
    archive = build_ensemble(linear_ensemble("upg"), tmp_path, "production")
    assert lines(archive, "24.10") == ["upg.tar.gz: ok: ensemble 'upg', 3 model folders"]
    assert lines(archive, "26.05")[0] == ("upg.tar.gz/conch-manifest.json: warning: built for Triton 24.10, checked "
                                          "for 26.05: nothing conch knows of differs there")
    assert lines(archive, "24.10") == ["upg.tar.gz: ok: ensemble 'upg', 3 model folders"]


def test_the_upgrade_check_says_how_many_findings_differ(tmp_path: Path) -> None:
    """seed 002's archive with the manifest of a conch build for 24.10: on 26.05 its two environments (Python
    3.10) cannot load, and bin/activate is no longer run."""
    built = build_ensemble(linear_ensemble("upg2"), tmp_path, "production")
    with tarfile.open(built) as tar:
        member = tar.extractfile(next(m for m in tar.getmembers() if m.name.endswith("conch-manifest.json")))
        assert member is not None
        manifest = member.read()
    archive = pack_repo({**bert_repo(), "conch-manifest.json": manifest}, tmp_path / "bert.tar.gz")
    found = lines(archive, "26.05")
    assert found[0] == ("bert.tar.gz/conch-manifest.json: warning: built for Triton 24.10, checked for 26.05: the 4 "
                        "findings below say what differs there")
    assert sum("runs Python 3.12 and cannot load it" in line for line in found) == 2



def test_a_local_archives_environment_is_judged_as_productions(tmp_path: Path) -> None:
    """The local target packs an environment for the release's Python, the bytes production ships: on 26.05 (Python
    3.12) its 3.10 environments cannot load either."""
    built = build_ensemble(linear_ensemble("loc"), tmp_path, "local")
    with tarfile.open(built) as tar:
        member = tar.extractfile(next(m for m in tar.getmembers() if m.name.endswith("conch-manifest.json")))
        assert member is not None
        manifest = member.read()
    assert json.loads(manifest)["target"] == "local"
    archive = pack_repo({**bert_repo(), "conch-manifest.json": manifest}, tmp_path / "bert.tar.gz")
    assert sum("runs Python 3.12 and cannot load it" in line for line in lines(archive, "26.05")) == 2

def test_without_a_release_an_archive_is_checked_for_the_one_it_was_built_for(tmp_path: Path) -> None:
    """An archive built for 25.11 is checked for 25.11 unless another release is asked for."""
    archive = build_ensemble(linear_ensemble("newer"), tmp_path, "production", release="25.11")
    assert lines(archive, "25.11") == lines(archive, None) == ["newer.tar.gz: ok: ensemble 'newer', 3 model folders"]
    assert text(archive, "24.10").startswith("newer.tar.gz/conch-manifest.json: warning: built for Triton 25.11, "
                                              "checked for 24.10: nothing conch knows of differs there")


def test_conch_check_release_on_the_command_line(tmp_path: Path) -> None:
    archive = pack_repo(bert_repo(), tmp_path / "bert.tar.gz")
    run = subprocess.run([sys.executable, "-m", "conch", "check", "--release", "26.05", "--json", str(archive)],
                         capture_output=True, text=True, cwd=ROOT, check=False)
    assert run.returncode == 1, run.stderr
    findings = json.loads(run.stdout)["archives"][0]["findings"]
    assert any("runs Python 3.12 and cannot load it" in f["message"] for f in findings), findings
    bad = subprocess.run([sys.executable, "-m", "conch", "check", "--release", "26", str(archive)],
                         capture_output=True, text=True, cwd=ROOT, check=False)
    assert bad.returncode == 2 and "release '26': write it as YY.MM, e.g. 24.10" in bad.stderr, bad.stderr


def test_env_python_reads_a_folder_and_a_tarball(tmp_path: Path) -> None:
    env = tmp_path / "env"
    (env / "lib" / "python3.12" / "site-packages").mkdir(parents=True)
    assert env_python(env) == "3.12"
    assert env_python(tmp_path / "missing.tar.gz") == ""
    with pytest.raises(BuildError, match="write it as YY.MM"):
        check_archive_models(pack_repo(bert_repo(), tmp_path / "b.tar.gz"), "2610")[0]
