"""`conch bench`, `conch plan --measure` and `conch stamp` of a single-model archive made by hand (python_backend's
add_sub layout, no conch manifest), with --payload: through the local MME and the real tritonserver."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from seed_archives import pack_repo
from single_models import add_sub_payload, add_sub_repo

from conch.archive.fleet_check import check_archive_models

pytestmark = pytest.mark.integration


def conch(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "conch.cli", *args], capture_output=True, text=True, timeout=600,
                          cwd=cwd)


def test_a_single_model_archive_benches_with_a_payload(tmp_path: Path) -> None:
    pack_repo(add_sub_repo(), tmp_path / "add_sub.tar.gz")
    add_sub_payload(tmp_path / "request.json")
    done = conch("bench", "add_sub.tar.gz", "--mme", "--stages", '[{"duration": 4, "users": 1, "spawn_rate": 1}]',
                 "--payload", "request.json", "--out", "b", cwd=tmp_path)  # one short stage: the payload is the point
    assert done.returncode == 0, done.stdout + done.stderr
    assert "clean run:" in done.stdout + done.stderr
    bench = json.loads((tmp_path / "b" / "bench.json").read_text())
    assert bench["failures"] == 0 and bench["requests"] > 0 and bench["targets"] == ["add_sub.tar.gz"], bench


def test_a_single_model_archive_is_measured_for_the_plan(tmp_path: Path) -> None:
    pack_repo(add_sub_repo(), tmp_path / "add_sub.tar.gz")
    add_sub_payload(tmp_path / "request.json")
    done = conch("plan", "--ensembles", "10", "--rps", "5", "--measure", "add_sub.tar.gz", "--measure-copies", "2",
                 "--payload", "request.json", "--out", "p", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "measuring add_sub.tar.gz: 2 copies through the local MME" in done.stdout + done.stderr
    assert (tmp_path / "p" / "plan.json").is_file()


def test_a_single_model_archive_is_stamped_without_step_names(tmp_path: Path) -> None:
    pack_repo(add_sub_repo(""), tmp_path / "root.tar.gz")
    done = conch("stamp", "root.tar.gz", "--as", "copy-1", "--as", "copy-2", "--out", "s", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no conch manifest" not in done.stderr  # no step names to record
    for name in ("copy-1.tar.gz", "copy-2.tar.gz"):
        assert check_archive_models(tmp_path / "s" / name)[0].single == "model"
