"""A build keeps what user and third-party code says (warnings, prints, progress bars, native writes to
descriptors 1 and 2) per ensemble and sums it up in one line; -v and --json show all of it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from conch.builder.capture import CapturedOutput, captured, summary

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"


def test_warnings_prints_bars_and_native_writes_are_kept_not_shown(capfd: pytest.CaptureFixture[str]) -> None:
    into: list[CapturedOutput] = []
    with captured("the export of step 'encoder'", into):
        warnings.warn("`resume_download` is deprecated", FutureWarning, stacklevel=1)
        print("hello from the export")
        sys.stderr.write("Loading weights: 10%\rLoading weights: 100%\n")
        os.write(1, b"native stdout\n")
        os.write(2, b"native stderr\n")
        os.write(2, b"W0000 00:00:1700000000.000000   12 cpu_feature_guard.cc:193] dropped as at start-up\n")
    assert capfd.readouterr() == ("", "")
    (kept,) = into
    assert kept.warnings[0].startswith("FutureWarning: `resume_download` is deprecated (")
    assert kept.lines == ("hello from the export", "Loading weights: 100%", "native stdout", "native stderr")
    assert summary("enc", into) == ("ensemble 'enc': 1 warning and 4 lines of output from the export of step "
                                    "'encoder'; -v shows them")


def test_code_that_says_nothing_leaves_nothing_and_no_line() -> None:
    into: list[CapturedOutput] = []
    with captured("quiet", into):
        pass
    assert into == [] and summary("e", into) is None


def test_what_failing_code_said_is_shown_with_the_failure(capfd: pytest.CaptureFixture[str]) -> None:
    into: list[CapturedOutput] = []
    with pytest.raises(ValueError, match="export broke"), captured("the export of step 's'", into):
        print("the last words before the failure")
        raise ValueError("export broke")
    assert "the last words before the failure" in capfd.readouterr().err
    assert into == []


def _build(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CONCH_CACHE_DIR": str(cache),
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(FIXTURES), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "conch.cli", "build", *args], capture_output=True, text=True,
                          timeout=600, env=env)


def test_a_build_sums_up_its_code_s_output_in_one_line_and_shows_it_with_v_and_json(tmp_path: Path) -> None:
    noisy = str(FIXTURES / "noisy")
    quiet = _build(noisy, str(FIXTURES / "cli_ensembles"), "--out", str(tmp_path / "a"), "-j", "2",
                   cache=tmp_path / "cache-a")
    assert quiet.returncode == 0, quiet.stderr
    lines = quiet.stderr.splitlines()
    assert ("ensemble 'noisy': 2 warnings and 3 lines of output from the export of step 'encoder' and the expected "
            "outputs of sample 'ones'; -v shows them") in lines
    assert len(lines) == 3  # two "built" lines and that one: nothing of what the code said
    assert quiet.stdout == ""

    verbose = _build(noisy, "--out", str(tmp_path / "b"), "-v", cache=tmp_path / "cache-b")
    assert verbose.returncode == 0, verbose.stderr
    for said in ("FutureWarning: `resume_download` is deprecated", "exporting the encoder",
                 "Loading weights: 100%|##########|", "native: graph optimised", "UserWarning: TracerWarning"):
        assert said in verbose.stderr
    assert "Loading weights: 50%" not in verbose.stderr  # a redrawn bar shows its last frame

    documented = _build(noisy, "--out", str(tmp_path / "c"), "--json", cache=tmp_path / "cache-c")
    (ensemble,) = json.loads(documented.stdout)["ensembles"]
    export, sample = ensemble["output"]
    assert export["what"] == "the export of step 'encoder'" and "native: graph optimised" in export["lines"]
    assert sample["warnings"][0].startswith("UserWarning: TracerWarning stand-in")
    assert (tmp_path / "a" / "noisy.tar.gz").read_bytes() == (tmp_path / "c" / "noisy.tar.gz").read_bytes()


def test_building_from_python_or_for_a_replay_says_the_same_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                      capfd: pytest.CaptureFixture[str]) -> None:
    from conch.builder.discover import discover
    from conch.builder.repository_build import build_ensemble

    monkeypatch.setenv("CONCH_CACHE_DIR", str(tmp_path / "cache"))  # the expected outputs are computed here
    (noisy,) = discover([FIXTURES / "noisy"])
    said: list[str] = []
    build_ensemble(noisy, tmp_path, "local", progress=said.append)
    assert said == ["ensemble 'noisy': 2 warnings and 3 lines of output from the export of step 'encoder' and the "
                    "expected outputs of sample 'ones'; `conch build -v` shows them"]
    assert "exporting the encoder" not in capfd.readouterr().err


def test_only_layouts_that_run_code_beyond_conchs_are_captured(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Python step's layout renders model.py and names its module's file: nothing of the user's runs, so
    nothing is captured around it (a capture redirects descriptors 1 and 2 twice per step); an ONNX step's
    layout (its stand-in reads the model) is."""
    from conftest import linear_ensemble

    from conch.backends.onnx import OnnxStep
    from conch.backends.python import PythonModelStep, PythonStep
    from conch.builder import repository_build

    assert not PythonStep.lays_out_with_code and not PythonModelStep.lays_out_with_code
    assert OnnxStep.lays_out_with_code
    real, said = repository_build.captured, []
    monkeypatch.setattr(repository_build, "captured", lambda what, into: (said.append(what), real(what, into))[1])
    repository_build.render_repository(linear_ensemble("uncaptured"), "local", "24.10")
    assert not [what for what in said if what.startswith("the export of step")]
