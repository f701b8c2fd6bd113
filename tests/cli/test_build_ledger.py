"""`conch build` answers an unchanged rebuild from its ledger (conch.ledger) without importing the ensemble
file, and every kind of change takes the ordinary build, which writes the right archive. Real builds in
subprocesses (the fast path is for the command line only); the observable is a line the ensemble file appends
to a file each time it is imported, never a timing."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conch.archive.manifest import read_manifest
from conch.cache import cache_dir

ROOT = Path(__file__).resolve().parents[2]

ENSEMBLE = '''import os
from pathlib import Path

import numpy as np
import helper
from steps_mod import scale

from conch import Ensemble, PythonStep, Tensor

with open(os.environ["LEDGER_MARK"], "a") as fh:
    fh.write("imported\\n")
WORD = (Path(__file__).parent / "word.txt").read_text().strip()
ens = Ensemble("ledgered", max_batch_size=8,
               description=f"{WORD} {helper.FACTOR} {os.environ.get('LEDGER_WORD', '')}".strip())
step = PythonStep("scale", scale, [Tensor("x", "FP32", [4])], [Tensor("y", "FP32", [4])], max_batch_size=8)
ens.output("Y", step(ens.input("X", "FP32", [4])))
ens.sample("ones", {"X": np.ones((1, 4), np.float32)}, {"Y": np.full((1, 4), 2, np.float32)})
'''
STEPS = '''import numpy as np


def scale(x):
    return {"y": (x * 2).astype(np.float32)}
'''


class Project:
    """A folder with one ensemble, its sibling modules and a data file, built by `python -m conch build`."""

    def __init__(self, root: Path) -> None:
        self.folder = root / "project"
        self.folder.mkdir()
        self.mark = root / "imported.txt"
        self.out = root / "dist"
        self.env = {**os.environ, "LEDGER_MARK": str(self.mark),
                    "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        self.env.pop("PYTHONDONTWRITEBYTECODE", None)
        self.clock = time.time() - 3600
        self.write("ledgered.py", ENSEMBLE)
        self.write("steps_mod.py", STEPS)
        self.write("helper.py", "FACTOR = 2\n")
        self.write("word.txt", "first\n")

    def write(self, name: str, text: str) -> None:
        path = self.folder / name
        path.write_text(text)
        # well before any build (a file written just now is not trusted by its mtime), a second apart from any
        # earlier version (Python's .pyc holds its source's mtime in whole seconds)
        self.clock += 2
        os.utime(path, (self.clock, self.clock))

    def imports(self) -> int:
        return len(self.mark.read_text().splitlines()) if self.mark.exists() else 0

    def build(self, *flags: str, cwd: Path | None = None, path: str | None = None,
              env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        args = [sys.executable, "-m", "conch", "build", path or str(self.folder / "ledgered.py"), "--target", "local",
                "--out", str(self.out), "-j", "1", *flags]
        done = subprocess.run(args, capture_output=True, text=True, timeout=600, cwd=cwd or self.folder.parent,
                              env=env or self.env)
        assert done.returncode == 0, done.stderr
        return done

    def settled(self, *flags: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
        """Build until the ledger is kept (an ordinary unchanged build keeps it) and return the ordinary
        unchanged build's output."""
        first = self.build(*flags, **kwargs)  # type: ignore[arg-type]
        if "] built " not in first.stderr:
            return first
        return self.build(*flags, **kwargs)  # type: ignore[arg-type]

    def description(self) -> str:
        return read_manifest(self.out / "ledgered.tar.gz").description


def _same(text: str) -> str:
    """The output with each build's own seconds taken out."""
    return re.sub(r"\([0-9.]+ s\)", "(s)", re.sub(r'"seconds": [0-9.]+', '"seconds": 0', text))


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Project:
    return Project(tmp_path_factory.mktemp("ledger"))


def _fast(project: Project, *flags: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    """A rebuild that must take the fast path: the ensemble file is not imported."""
    before = project.imports()
    done = project.build(*flags, **kwargs)  # type: ignore[arg-type]
    assert project.imports() == before, f"the ensemble file was imported: {done.stderr}"
    return done


def _ordinary(project: Project, *flags: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    before = project.imports()
    done = project.build(*flags, **kwargs)  # type: ignore[arg-type]
    assert project.imports() > before, f"the fast path answered: {done.stderr}"
    return done


def test_an_unchanged_rebuild_says_what_the_ordinary_one_says_without_importing_the_file(project: Project) -> None:
    ordinary = project.settled()
    assert "] unchanged " in ordinary.stderr
    fast = _fast(project)
    assert _same(fast.stderr) == _same(ordinary.stderr)
    assert fast.stdout == ordinary.stdout == ""
    assert project.description() == "first 2"
    # --json: the same document (its seconds aside), and nothing else on stdout
    ordinary_json = project.settled("--json")
    fast_json = _fast(project, "--json")
    assert _same(fast_json.stdout) == _same(ordinary_json.stdout)
    assert json.loads(fast_json.stdout)["ensembles"][0]["written"] is False
    project.settled("--quiet")
    quiet = _fast(project, "--quiet")
    assert quiet.stderr == quiet.stdout == ""


@pytest.mark.parametrize("change", ["ensemble file", "sibling module", "data file", "shadowing module"])
def test_a_changed_input_takes_the_ordinary_build_and_writes_the_right_archive(project: Project,
                                                                              change: str) -> None:
    project.settled()
    _fast(project)
    if change == "ensemble file":
        project.write("ledgered.py", ENSEMBLE.replace('.strip())\nstep', '.strip() + "!")\nstep'))
        expected = "first 2!"
    elif change == "sibling module":
        project.write("helper.py", "FACTOR = 3\n")
        expected = "first 3"
    elif change == "data file":
        project.write("word.txt", "second\n")
        expected = "second 2"
    else:  # a package beside helper.py of the same name is what `import helper` finds (packages come first)
        (project.folder / "helper").mkdir()
        project.write("helper/__init__.py", "FACTOR = 5\n")
        expected = "first 5"
    built = _ordinary(project)
    assert "] built " in built.stderr
    assert project.description() == expected
    _ordinary(project)  # this ordinary unchanged build keeps the ledger again
    _fast(project)
    # put the project back for the other cases
    project.write("ledgered.py", ENSEMBLE)
    project.write("helper.py", "FACTOR = 2\n")
    project.write("word.txt", "first\n")
    shutil.rmtree(project.folder / "helper", ignore_errors=True)


def test_an_environment_variable_the_declaration_reads_takes_the_ordinary_build(project: Project) -> None:
    project.settled()
    _fast(project)
    changed = {**project.env, "LEDGER_WORD": "env"}
    _ordinary(project, env=changed)
    assert project.description() == "first 2 env"
    _ordinary(project)
    assert project.description() == "first 2"


@pytest.mark.parametrize("flags", [("--release", "24.09"), ("--target", "production"), ("--out", "elsewhere")])
def test_another_target_release_or_out_is_another_command(project: Project, flags: tuple[str, ...]) -> None:
    project.settled()
    _fast(project)
    out = project.folder.parent / flags[1] if flags[0] == "--out" else None
    done = _ordinary(project, *flags)
    # argparse takes the last --target/--out given: the archive lands where asked, for what was asked
    written = (out or project.out) / "ledgered.tar.gz"
    manifest = read_manifest(written)
    assert "] built " in done.stderr
    assert manifest.release == (flags[1] if flags[0] == "--release" else "24.10")
    assert manifest.target == (flags[1] if flags[0] == "--target" else "local")
    project.settled()  # back to the usual archive
    _fast(project)


@pytest.mark.parametrize("damage", ["deleted", "modified", "touched"])
def test_a_deleted_or_modified_archive_is_built_again(project: Project, damage: str) -> None:
    project.settled()
    _fast(project)
    archive = project.out / "ledgered.tar.gz"
    content = archive.read_bytes()
    if damage == "deleted":
        archive.unlink()
    elif damage == "modified":
        archive.write_bytes(content[:-10] + b"\0" * 10)
    else:
        os.utime(archive)
    done = _ordinary(project)
    assert "] built " in done.stderr
    assert archive.read_bytes() == content


def test_refresh_always_builds(project: Project) -> None:
    project.settled()
    _fast(project)
    for _ in range(2):
        _ordinary(project, "--refresh")


def test_the_fast_path_works_from_any_folder(project: Project, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    for cwd, path in [(ROOT, str(project.folder / "ledgered.py")), (project.folder, "ledgered.py"),
                      (empty, os.path.relpath(project.folder / "ledgered.py", empty))]:
        ordinary = project.settled(cwd=cwd, path=path)
        fast = _fast(project, cwd=cwd, path=path)
        assert _same(fast.stderr) == _same(ordinary.stderr)


@pytest.mark.parametrize("damage", ["truncated", "not json", "another shape"])
def test_a_damaged_ledger_is_ignored_and_written_again(project: Project, damage: str) -> None:
    project.settled()
    _fast(project)
    cache = Path(project.env.get("CONCH_CACHE_DIR") or cache_dir())
    argv = ["build", str(project.folder / "ledgered.py"), "--target", "local", "--out", str(project.out), "-j", "1"]
    (latest,) = [p for p in (cache / "ledgers").glob("*.json") if _command_of(p) == (argv, str(project.folder.parent))]
    text = latest.read_text()
    if damage == "truncated":
        latest.write_text(text[: len(text) // 2])
    elif damage == "not json":
        latest.write_bytes(b"\x00\xff garbage")
    else:
        data = json.loads(text)
        data["replay"] = {"ensembles": "not a list"}
        data["entries"] = [["/", "f"]]
        latest.write_text(json.dumps(data))
    done = _ordinary(project)
    assert "Traceback" not in done.stderr and "] unchanged " in done.stderr
    _fast(project)


def _command_of(ledger: Path) -> tuple[list[str], str] | None:
    try:
        identity = json.loads(ledger.read_text())["identity"]
    except (ValueError, KeyError, TypeError):
        return None
    return identity["argv"], identity["cwd"]


def test_a_file_that_prints_when_imported_is_never_answered_from_a_ledger(project: Project) -> None:
    """What it prints would not be printed by a replay."""
    project.write("ledgered.py", ENSEMBLE + "print('hello from the declaration')\n")
    try:
        for _ in range(3):
            done = _ordinary(project)
            assert "hello from the declaration" in done.stdout
    finally:
        project.write("ledgered.py", ENSEMBLE)


def test_parallel_workers_send_what_they_read_and_a_shard_is_answered_too(tmp_path: Path) -> None:
    """With -j 2 each ensemble is built in a forked worker: what it read comes back for the ledger; a change
    still builds; `--shard` says its line again."""
    project = Project(tmp_path)
    project.write("second.py", ENSEMBLE.replace('"ledgered"', '"second"'))
    folder = str(project.folder)

    def build(*flags: str) -> subprocess.CompletedProcess[str]:
        return project.build("-j", "2", *flags, path=folder)

    project.settled("-j", "2", path=folder)
    before = project.imports()
    fast = build()
    assert project.imports() == before and sorted(re.findall(r"unchanged (\S+)", fast.stderr)) == [
        str(project.out / "ledgered.tar.gz"), str(project.out / "second.tar.gz")]
    project.write("word.txt", "parallel\n")
    assert "] built " in build().stderr
    assert project.description() == "parallel 2"
    build()
    before = project.imports()
    build()
    assert project.imports() == before
    ordinary = project.settled("-j", "2", "--shard", "2/2", path=folder)  # both names fall in shard 2 of 2
    before = project.imports()
    fast = build("--shard", "2/2")
    assert project.imports() == before
    # workers finish in either order: the same lines, the order of the two ensembles aside
    assert sorted(re.sub(r"\[\d/2\] ", "", _same(fast.stderr)).splitlines()) == sorted(
        re.sub(r"\[\d/2\] ", "", _same(ordinary.stderr)).splitlines())
    assert fast.stderr.startswith("shard 2/2: 2 of the 2 ensembles found\n")


def test_modules_with_odd_paths_do_not_stop_the_ledger(tmp_path: Path) -> None:
    """torch registers modules whose ``__path__`` cannot be iterated (``torch._classes``): the trace of a -j
    worker that imported torch still comes back, and the command is answered from its ledger."""
    pytest.importorskip("torch")
    project = Project(tmp_path)
    project.write("ledgered.py", "import torch  # noqa: F401\n" + ENSEMBLE)
    project.write("second.py", ENSEMBLE.replace('"ledgered"', '"second"'))
    ordinary = project.settled("-j", "2", path=str(project.folder))
    assert "warning" not in ordinary.stderr and "error" not in ordinary.stderr
    before = project.imports()
    project.build("-j", "2", path=str(project.folder))
    assert project.imports() == before


def test_a_declaration_that_runs_a_program_is_never_answered_from_a_ledger(tmp_path: Path) -> None:
    """Another program's answer (`git describe`, say) is not a file the ledger can check."""
    project = Project(tmp_path)
    project.write("ledgered.py", "import subprocess, sys\nsubprocess.run([sys.executable, '-c', 'pass'], check=True)\n"
                  + ENSEMBLE)
    for _ in range(3):
        _ordinary(project)
