"""The local stubs run the release's image Python, with the image's packages only, or say they do not."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import image_python_steps
import numpy as np
import pytest

from conch import Ensemble, PythonStep, ServeError, Tensor
from conch.builder.repository_build import build_ensemble
from conch.ensembles.target import Release
from conch.image_python import INTERPRETER_ENV, find_interpreter, given_interpreter, image_packages, image_requirements
from conch.replays.local_replay import replay_archives
from conch.triton.stub_python import STRICT_ENV, stub_python
from conch.verdicts import PYTHON_ROW

HOST = f"{sys.version_info.major}.{sys.version_info.minor}"
needs_310 = pytest.mark.skipif(find_interpreter("3.10") is None, reason="no Python 3.10 on this machine (pyenv, uv, "
                               "conda, python3.10 on PATH): the 24.10 image's Python cannot be proven here")
needs_312 = pytest.mark.skipif(find_interpreter("3.12") is None, reason="no Python 3.12 on this machine")


def one_step(name: str, code) -> Ensemble:  # type: ignore[no-untyped-def]
    ens = Ensemble(name, max_batch_size=4)
    step = PythonStep("twice", code, inputs=[Tensor("x", "FP32", [4])], outputs=[Tensor("y", "FP32", [4])],
                      max_batch_size=4)
    ens.output("Y", step(ens.input("X", "FP32", [4])))
    x = np.ones((2, 4), np.float32)
    ens.sample("ones", {"X": x}, {"Y": x * 2})
    return ens


@pytest.fixture
def no_310(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine where no Python 3.10 is kept anywhere conch looks."""
    for name in ("PYENV_ROOT", "UV_PYTHON_INSTALL_DIR", "CONDA_PREFIX", "CI", STRICT_ENV, INTERPRETER_ENV + "3_10"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    kept = [p for p in os.environ.get("PATH", "").split(os.pathsep) if not Path(p, "python3.10").exists()]
    monkeypatch.setenv("PATH", os.pathsep.join(kept))


def test_the_image_packages_follow_build_py() -> None:
    assert image_requirements(Release.of("23.05")) == ("pip", "setuptools", "wheel", "numpy<2")
    assert image_requirements(Release.of("24.10")) == ("pip", "setuptools", "wheel", "numpy<2", "virtualenv")
    assert image_requirements(Release.of("25.01")) == image_requirements(Release.of("24.10"))
    # what conch check takes the image to provide follows the same table: virtualenv from 24.04 only
    assert "virtualenv" not in image_packages("23.05") and "virtualenv" in image_packages("24.10")


@needs_310
def test_the_stub_of_24_10_runs_310_with_the_image_packages_only() -> None:
    stub = stub_python(["24.10"])
    assert (stub.version, stub.faithful, stub.note) == ("3.10", True, "")
    site = stub.environment / "lib" / "python3.10" / "site-packages"
    held = {p.name.split("-")[0].lower() for p in site.glob("*.dist-info")}
    assert {"numpy", "pip", "setuptools", "wheel", "virtualenv"} <= held and "pyyaml" not in held
    assert "include-system-site-packages = false" in (stub.environment / "pyvenv.cfg").read_text()
    assert stub_python(["24.10"]).environment == stub.environment  # built once, in the cache


def test_python_gives_the_interpreter_of_its_version(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(INTERPRETER_ENV + HOST.replace(".", "_"), raising=False)
    found = given_interpreter(Path(sys.executable))
    assert found.version == HOST and os.environ[INTERPRETER_ENV + HOST.replace(".", "_")] == sys.executable
    again = find_interpreter(HOST)
    assert again is not None and again.found_by == INTERPRETER_ENV + HOST.replace(".", "_")


def test_python_that_is_not_an_interpreter_is_refused(tmp_path: Path) -> None:
    fake = tmp_path / "python3.10"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    with pytest.raises(ServeError, match=r"--python .*python3.10: not a CPython with a shared libpython"):
        given_interpreter(fake)


def test_mixed_image_pythons_are_refused_on_one_server() -> None:
    with pytest.raises(ServeError, match=r"releases 24.10, 25.01 run Python-backend steps on Pythons 3.10, 3.12; "
                       "one local server runs one"):
        stub_python(["24.10", "25.01"])


@pytest.mark.skipif(HOST == "3.10", reason="conch runs on 3.10 itself")
def test_without_310_the_host_runs_and_says_so(no_310: None, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.warns(RuntimeWarning, match=rf"ran on {HOST}; the 24.10 image runs 3.10"):
        stub = stub_python(["24.10"])
    assert not stub.faithful and stub.version == HOST
    with pytest.raises(ServeError, match=rf"stub ran on {HOST}; the 24.10 image runs 3.10 .*--strict \(and CI\) "
                       "refuse"):
        stub_python(["24.10"], strict=True)
    monkeypatch.setenv("CI", "true")
    from conch.triton.server import LocalTriton

    with pytest.raises(ServeError, match="refuse to run on another Python than the image's"):
        LocalTriton.sized_for([])


@pytest.mark.integration
@pytest.mark.skipif(HOST == "3.10", reason="conch runs on 3.10 itself")
def test_a_replay_without_310_has_a_python_row_that_strict_fails(tmp_path: Path, no_310: None) -> None:
    archive = build_ensemble(one_step("host_python", image_python_steps.toml_twice), tmp_path, "local", "24.10")
    with pytest.warns(RuntimeWarning):
        report = replay_archives([archive], endpoints=["kserve"])
    (row,) = [r for r in report.rows if r.endpoint == PYTHON_ROW]
    assert row.passed and row.detail.startswith(f"ran on {HOST}; the 24.10 image runs 3.10"), report.table()
    assert f"1 archive(s) not on their image's Python: ran on {HOST}; the 24.10 image runs 3.10" in report.table()
    with pytest.warns(RuntimeWarning):
        strict = replay_archives([archive], endpoints=["kserve"], strict=True)
    assert not strict.passed and not next(r for r in strict.rows if r.endpoint == PYTHON_ROW).passed


@pytest.mark.integration
@needs_310
def test_a_package_the_image_lacks_fails_the_replay(tmp_path: Path) -> None:
    archive = build_ensemble(one_step("needs_yaml", image_python_steps.yaml_twice), tmp_path, "local", "24.10")
    report = replay_archives([archive], endpoints=["kserve"])
    assert not report.passed
    (row,) = [r for r in report.rows if r.endpoint == "kserve"]
    assert "ModuleNotFoundError: No module named 'yaml'" in row.detail, report.table()


@pytest.mark.integration
@needs_310
@needs_312
def test_tomllib_fails_on_24_10_and_holds_on_25_01(tmp_path: Path) -> None:
    old = build_ensemble(one_step("toml_old", image_python_steps.toml_twice), tmp_path / "a", "local", "24.10")
    new = build_ensemble(one_step("toml_new", image_python_steps.toml_twice), tmp_path / "b", "local", "25.01")
    report = replay_archives([old, new], endpoints=["kserve"])  # two servers: 3.10 and 3.12
    rows = {r.ensemble: r for r in report.rows if r.endpoint == "kserve"}
    assert "ModuleNotFoundError: No module named 'tomllib'" in rows[old.name].detail, report.table()
    assert rows[new.name].passed, report.table()
    assert not [r for r in report.rows if r.endpoint == PYTHON_ROW]


def test_archives_of_two_image_pythons_are_refused_on_one_endpoint(tmp_path: Path) -> None:
    from conch.triton.stub_python import release_of

    old = build_ensemble(one_step("mme_old", image_python_steps.toml_twice), tmp_path / "a", "local", "24.10")
    new = build_ensemble(one_step("mme_new", image_python_steps.toml_twice), tmp_path / "b", "local", "25.01")
    assert release_of([old]) == "24.10" and release_of([]) == "24.10"
    with pytest.raises(ServeError, match=r"archives of releases 24.10, 25.01 run Python-backend steps on different "
                       "Pythons; one endpoint runs one image"):
        release_of([old, new])


def test_a_conch_python_without_libpython_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from conch.triton.stub_python import host_interpreter

    fake = tmp_path / "python3"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(fake))
    with pytest.raises(ServeError, match=r"has no shared libpython, so the local Python-backend stub cannot run on "
                       "it; install an interpreter of the release's Python"):
        host_interpreter()


def test_packages_that_do_not_install_are_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from conch.triton.stub_python import host_interpreter, image_environment

    monkeypatch.setenv("CONCH_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(ServeError, match=r"could not install the image's Python packages \(conch-no-such-package-"
                       rf"39\) for Python {HOST}"):
        image_environment(host_interpreter(), ("conch-no-such-package-39",))


def test_the_server_passes_sagemakers_flags_and_the_image_environment(tmp_path: Path) -> None:
    from conch.triton.server import LocalTriton

    server = LocalTriton(tmp_path / "w")
    assert "--disable-auto-complete-config" not in server.command()  # SageMaker's serve script does not pass it
    assert "--disable-auto-complete-config" in LocalTriton(tmp_path / "x", auto_complete=False).command()
    env = server.environment()
    assert env["PATH"].split(os.pathsep)[0] == str(server.stub.environment / "bin")
    assert env["LD_LIBRARY_PATH"].split(os.pathsep)[-1] == str(server.stub.interpreter.libdir)
    assert env["CONCH_HOST_PYTHON"] == sys.executable  # where GPU-less stand-ins run their framework
    backend = next(a for a in server.command() if a.startswith("--backend-directory="))
    assert f"py{server.stub.version}-" in backend


@pytest.mark.integration
@pytest.mark.skipif(HOST == "3.10", reason="conch runs on 3.10 itself")
def test_replay_strict_on_the_command_line_fails_without_310(tmp_path: Path, no_310: None,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    from conch.cli import main

    archive = build_ensemble(one_step("cli_strict", image_python_steps.toml_twice), tmp_path, "local", "24.10")
    try:
        with pytest.warns(RuntimeWarning):
            code = main(["replay", str(archive), "--endpoint", "kserve", "--strict"])
    finally:
        os.environ.pop(STRICT_ENV, None)  # --strict holds for the process: not for the tests after this one
    out = capsys.readouterr().out
    assert code == 1, out
    assert re.search(rf"python\s+FAIL\s+[0-9.]+\s+ran on {HOST}; the 24.10 image runs 3.10", out), out
    assert f"1 archive(s) not on their image's Python: ran on {HOST}; the 24.10 image runs 3.10" in out
