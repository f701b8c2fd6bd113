"""Incremental and parallel builds, as a user runs them (`conch build` in its own process): an unchanged
rebuild leaves every archive untouched and asks no package index; a change of one input rebuilds
exactly the ensembles it reaches; serial and parallel builds write the same bytes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import REFUSED_URL

STEPS_A = """
import numpy as np

def double(x):
    return {"y": (x * 2).astype(np.float32)}
"""

STEPS_B = """
import numpy as np

class Scale:
    def setup(self, context):
        self.k = float(open(context.file("k.txt")).read())

    def __call__(self, x):
        return {"y": (x * self.k).astype(np.float32)}
"""

PIPES = """
import numpy as np
from steps_a import double
from steps_b import Scale

from conch import Ensemble, PythonStep, Tensor

def ensemble(name, code, files=None, batch=4):
    ens = Ensemble(name, max_batch_size=4)
    step = PythonStep("s", code, inputs=[Tensor("x", "FP32", [2])],
                      outputs=[Tensor("y", "FP32", [2])], max_batch_size=batch,
                      files=files)
    ens.output("Y", step(ens.input("X", "FP32", [2])))
    return ens

alpha = ensemble("alpha", double)
beta = ensemble("beta", Scale, files={"k.txt": "k.txt"}, batch=BETA_BATCH)
gamma = ensemble("gamma", double)
gamma.sample("counted", {"X": np.ones((1, 2), np.float32)}, lambda: counted(), pure=SAMPLE_CACHE)

def counted():
    with open("expected-calls.txt", "a") as fh:
        fh.write("1\\n")
    return {"Y": np.full((1, 2), 2, np.float32)}
"""

NAMES = ("alpha", "beta", "gamma")


def write_project(root: Path, beta_batch: int = 4, sample_cache: bool = True) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "steps_a.py").write_text(textwrap.dedent(STEPS_A))
    (root / "steps_b.py").write_text(textwrap.dedent(STEPS_B))
    (root / "k.txt").write_text("3\n")
    (root / "pipes.py").write_text(PIPES.replace("BETA_BATCH", str(beta_batch))
                                   .replace("SAMPLE_CACHE", str(sample_cache)))
    return root / "pipes.py"


def conch(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([sys.executable, "-m", "conch.cli", *args], capture_output=True, text=True, cwd=cwd,
                            timeout=600, env={**os.environ, **env})
    return result


def stamps(out: Path) -> dict[str, tuple[int, int]]:
    return {p.name.removesuffix(".tar.gz"): (p.stat().st_ino, p.stat().st_mtime_ns) for p in out.glob("*.tar.gz")}


def rebuilt(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> set[str]:
    return {name for name in after if before.get(name) != after[name]}


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CONCH_CACHE_DIR", str(tmp_path / "cache"))  # build records start empty
    return write_project(tmp_path / "project")


def test_unchanged_rebuild_touches_no_archive(project: Path) -> None:
    out = project.parent / "dist"
    first = conch(project.parent, "build", str(project), "--out", str(out), "-j", "2")
    assert first.returncode == 0, first.stderr
    before = stamps(out)
    assert set(before) == set(NAMES)
    again = conch(project.parent, "build", str(project), "--out", str(out), "-j", "2")
    assert again.returncode == 0, again.stderr
    assert rebuilt(before, stamps(out)) == set()
    assert again.stderr.count("] unchanged ") == 3


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ("declaration", {"beta"}),
        ("step code", {"alpha", "gamma"}),
        ("file", {"beta"}),
        ("release", set(NAMES)),
        ("target", set(NAMES)),
        ("archive deleted", {"gamma"}),
    ],
)
def test_a_change_rebuilds_exactly_the_ensembles_it_reaches(project: Path, change: str, expected: set[str]) -> None:
    out = project.parent / "dist"
    assert conch(project.parent, "build", str(project), "--out", str(out)).returncode == 0
    before = stamps(out)
    args = ["build", str(project), "--out", str(out)]
    if change == "declaration":
        write_project(project.parent, beta_batch=8)
    elif change == "step code":
        (project.parent / "steps_a.py").write_text(textwrap.dedent(STEPS_A) + "\n# a comment is a change\n")
    elif change == "file":
        (project.parent / "k.txt").write_text("4\n")
    elif change == "release":
        args += ["--release", "24.05"]
    elif change == "target":
        args += ["--target", "local"]
    else:
        (out / "gamma.tar.gz").unlink()
        before.pop("gamma")
    result = conch(project.parent, *args)
    assert result.returncode == 0, result.stderr
    assert rebuilt(before, stamps(out)) == expected


def test_expected_outputs_not_declared_pure_are_computed_at_every_build(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONCH_CACHE_DIR", str(tmp_path / "cache"))
    project = write_project(tmp_path / "project", sample_cache=False)
    calls = project.parent / "expected-calls.txt"
    for _ in range(2):
        assert conch(project.parent, "build", str(project), "--out", "a", "--only", "gamma").returncode == 0
    assert len(calls.read_text().splitlines()) == 2


def test_expected_outputs_declared_pure_are_computed_once_per_content(project: Path) -> None:
    calls = project.parent / "expected-calls.txt"
    for out in ("a", "b"):  # a second output folder: the archive is written, the expectation is cached
        assert conch(project.parent, "build", str(project), "--out", out).returncode == 0
    assert len(calls.read_text().splitlines()) == 1
    (project.parent / "steps_a.py").write_text(textwrap.dedent(STEPS_A) + "\n# the model changed\n")
    assert conch(project.parent, "build", str(project), "--out", "a").returncode == 0
    assert len(calls.read_text().splitlines()) == 2
    assert conch(project.parent, "build", str(project), "--out", "a", "--refresh").returncode == 0
    assert len(calls.read_text().splitlines()) == 3


def test_parallel_and_serial_builds_are_byte_identical(project: Path) -> None:
    for jobs in ("1", "2"):
        result = conch(project.parent, "build", str(project), "--out", f"j{jobs}", "-j", jobs, "--target", "local")
        assert result.returncode == 0, result.stderr
    serial = sorted((project.parent / "j1").glob("*.tar.gz"))
    assert [p.name for p in serial] == [f"{n}.tar.gz" for n in sorted(NAMES)]
    for archive in serial:
        assert archive.read_bytes() == (project.parent / "j2" / archive.name).read_bytes(), archive.name


def test_parallel_build_reports_each_failure_and_builds_the_rest(project: Path) -> None:
    (project.parent / "k.txt").unlink()
    result = conch(project.parent, "build", str(project), "--out", "dist", "-j", "2")
    assert result.returncode == 2
    assert "conch: error:" in result.stderr and "'k.txt'" in result.stderr and "Traceback" not in result.stderr
    assert set(stamps(project.parent / "dist")) == {"alpha", "gamma"}


ENV_PIPES = """
from env_steps import where

from conch import Ensemble, PythonEnv, PythonStep, Tensor

ens = Ensemble("with_env", max_batch_size=4)
step = PythonStep("where0", where, inputs=[Tensor("x", "FP32", [1])],
                  outputs=[Tensor("WHERE", "BYTES", [3])], max_batch_size=4,
                  env=PythonEnv(requirements=("tabulate==0.9.0",)))
ens.output("WHERE0", step(ens.input("X", "FP32", [1])))
"""

UNREACHABLE_INDEX = {"PIP_INDEX_URL": f"{REFUSED_URL}/simple", "PIP_RETRIES": "0", "PIP_TIMEOUT": "1",
                     "PIP_NO_CACHE_DIR": "1", "PIP_FIND_LINKS": ""}


@pytest.mark.integration
def test_a_rebuild_does_not_ask_the_package_index(tmp_path: Path) -> None:
    fixtures = Path(__file__).resolve().parent.parent / "fixtures"
    (tmp_path / "env_steps.py").write_text((fixtures / "env_steps.py").read_text())
    (tmp_path / "pipes.py").write_text(textwrap.dedent(ENV_PIPES))
    first = conch(tmp_path, "build", "pipes.py", "--out", "dist")  # resolves with the real index (or pip's cache)
    assert first.returncode == 0, first.stderr
    (tmp_path / "dist" / "with_env.tar.gz").unlink()  # a real rebuild: render, pack, write
    offline = conch(tmp_path, "build", "pipes.py", "--out", "dist", **UNREACHABLE_INDEX)
    assert offline.returncode == 0, offline.stderr
    assert "resolving" not in offline.stderr
    refreshed = conch(tmp_path, "build", "pipes.py", "--out", "dist", "--refresh", **UNREACHABLE_INDEX)
    assert refreshed.returncode == 2, "--refresh must ask the index (which is unreachable here)"
    assert "resolving" in refreshed.stderr and "Traceback" not in refreshed.stderr
