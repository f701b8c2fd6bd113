"""Every command works whichever folder the user stands in: the repository root, the ensemble's own folder
or an unrelated empty one (paths derived from user code must not depend on the working folder)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conch.cache import code_digest

ROOT = Path(__file__).resolve().parent.parent
FOLDER = ROOT / "tests" / "fixtures" / "anywhere"
ENSEMBLE = FOLDER / "three_frameworks.py"


def conch(cwd: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "conch.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env)


def _relative(path: Path, cwd: Path) -> str:
    """``path`` as the user in ``cwd`` types it."""
    return os.path.relpath(path, cwd)


def test_a_module_with_a_relative_file_does_not_enter_the_sample_digest(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """torch registers `torch._ops` and `torch._classes` with ``__file__`` a bare ``_ops.py``: standing in the
    ensemble's folder must not make them look like files of that folder (the digest read them and failed)."""
    source = tmp_path / "expected_here.py"
    source.write_text("def expected():\n    return {}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    import expected_here

    pseudo = type(sys)("pseudo_ops")
    pseudo.__file__ = "_ops.py"
    monkeypatch.setitem(sys.modules, "pseudo_ops", pseudo)
    before = code_digest(expected_here.expected)
    (tmp_path / "_ops.py").write_text("x = 1\n")  # even a real file of that name there is not the module's
    assert code_digest(expected_here.expected) == before != "unknown"
    assert before is not None  # a function in a file is told by its content


def test_the_sample_digest_follows_the_siblings_the_file_imports_not_what_this_process_loaded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Building one ensemble or the whole folder (whose other files a worker may have imported) gives a
    sample the same key; a sibling the file imports, even inside a function, is part of it."""
    (tmp_path / "helper_here.py").write_text("SCALE = 2\n")
    (tmp_path / "unrelated_here.py").write_text("x = 1\n")
    (tmp_path / "samples_here.py").write_text("def expected():\n    import helper_here\n    return {}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import samples_here

    before = code_digest(samples_here.expected)
    import unrelated_here  # noqa: F401 - loaded by another ensemble of the folder

    (tmp_path / "unrelated_here.py").write_text("x = 2\n")
    assert code_digest(samples_here.expected) == before
    (tmp_path / "helper_here.py").write_text("SCALE = 3\n")
    assert code_digest(samples_here.expected) != before


@pytest.mark.slow
@pytest.mark.integration
def test_an_ensemble_whose_samples_import_torch_builds_and_replays_from_its_own_folder(tmp_path: Path) -> None:
    """The issue's case: `cd ensembles && conch build resnet_pytorch.py --target local` (torch in the
    expected outputs) failed with FileNotFoundError '.../ensembles/_ops.py'."""
    out = _relative(tmp_path / "dist", FOLDER)
    built = conch(FOLDER, "build", ENSEMBLE.name, "--target", "local", "--out", out)
    assert built.returncode == 0, built.stderr
    assert "built" in built.stderr and "three_frameworks.tar.gz" in built.stderr
    replayed = conch(FOLDER, "replay", f"{out}/three_frameworks.tar.gz")
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "0 failed" in replayed.stdout and " passed" in replayed.stdout


def _serve_answers(cwd: Path, archive: str) -> None:
    """`conch serve <archive>` starts, says it is ready, and stops on Ctrl-C."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "conch.cli", "serve", archive, "--port", "0"], cwd=cwd,
                            stderr=subprocess.PIPE, text=True, env=env, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # as test_cli.py's
    try:
        assert proc.stderr is not None
        seen = []
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            seen.append(line)
            if "Ctrl-C stops" in line:
                break
        assert any("Ctrl-C stops" in s for s in seen), "".join(seen)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 128 + signal.SIGINT
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.parametrize("where", ["root", "ensemble folder", "empty folder"])
def test_every_command_works_from_any_folder(where: str, tmp_path: Path) -> None:
    cwd = {"root": ROOT, "ensemble folder": FOLDER, "empty folder": tmp_path / "empty"}[where]
    cwd.mkdir(exist_ok=True)
    source = _relative(ENSEMBLE, cwd)
    dist = _relative(tmp_path / "dist", cwd)
    local = _relative(tmp_path / "local", cwd)
    archive = f"{dist}/three_frameworks.tar.gz"
    steps: list[tuple[str, ...]] = [
        ("build", source, "--out", dist),
        ("build", source, "--target", "local", "--out", local),
        ("check", archive),
        ("inspect", archive),
        ("run", source),
        ("graph", source),
        ("graph", source, "--format", "svg", "--out", _relative(tmp_path / "pictures", cwd)),
        ("replay", f"{local}/three_frameworks.tar.gz"),
        ("replay", source),
        ("bench", f"{local}/three_frameworks.tar.gz", "--mme", "--stages", "quick",
         "--out", _relative(tmp_path / "bench", cwd)),
    ]
    for args in steps:
        done = conch(cwd, *args)
        assert done.returncode == 0, f"conch {' '.join(args)} in {cwd}:\n{done.stdout}\n{done.stderr}"
    assert (tmp_path / "pictures" / "three_frameworks.svg").is_file()
    assert (tmp_path / "bench" / "bench.json").is_file()
    _serve_answers(cwd, f"{local}/three_frameworks.tar.gz")
