"""observe() runs the ensemble in this process at every build when a step's code is not declared pure; for
code declared ``pure=True``, once per content: an unchanged rebuild takes its warmup and shared-memory
sizes from conch's cache; a change to the step code, a step file, a sample or the warmup runs it again
(counted by ``conch.builder.observe.runs``)."""

from __future__ import annotations

import importlib
import itertools
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from conch import BuildError, Ensemble, PythonStep, Release, Target, Tensor
from conch.builder import observe
from conch.builder.repository_build import render_repository
from conch.ensembles.layout import StepLayout

STEPS = '''import numpy as np


def as_text(x):
    return {"t": np.array([[str(float(row.sum()))] for row in x], dtype=object)}
'''
_names = itertools.count()


@pytest.fixture
def steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """A step module of its own in a folder of its own (its content is part of the key), and a cache of
    this test's own (the session's cache may hold these very findings from an earlier run)."""
    monkeypatch.setenv("CONCH_CACHE_DIR", str(tmp_path / "cache"))
    name = f"observe_steps_{next(_names)}"
    (tmp_path / f"{name}.py").write_text(STEPS)
    (tmp_path / "table.txt").write_text("one table\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return importlib.import_module(name)


def declared(steps: ModuleType, value: float = 1.0, count: int = 1, pure: bool = True) -> Ensemble:
    """X -> as_text (BYTES out, so shared memory is sized from the sample), with a warmup from the sample."""
    folder = Path(steps.__file__).parent  # type: ignore[arg-type]
    ens = Ensemble(f"observed_{steps.__name__}", max_batch_size=4)
    step = PythonStep("as_text", steps.as_text, inputs=[Tensor("x", "FP32", [4])], outputs=[Tensor("t", "BYTES", [1])],
                      files={"table.txt": folder / "table.txt"}, max_batch_size=4, pure=pure)
    ens.output("T", step(ens.input("X", "FP32", [4])))
    ens.sample("one", {"X": np.full((2, 4), value, np.float32)},
               {"T": np.array([[str(4 * value)]] * 2, dtype=object)})
    ens.warmup("one", count=count)
    return ens


def runs_for(ens: Ensemble, refresh: bool = False) -> tuple[int, dict[str, object]]:
    before = observe.runs
    repo = render_repository(ens, "local", "24.10", refresh=refresh)
    return observe.runs - before, repo.files  # type: ignore[return-value]


def test_an_unchanged_rebuild_runs_nothing_and_builds_the_same_files(steps: ModuleType) -> None:
    ran, first = runs_for(declared(steps))
    assert ran == 1
    ran, again = runs_for(declared(steps))  # a new declaration object with the same content
    assert ran == 0
    assert again == first  # warmup files, configs (model_warmup) and manifest (shm sizes) all alike
    assert any(name.endswith("/warmup/0_x") for name in again)


def test_code_not_declared_pure_runs_at_every_build(steps: ModuleType) -> None:
    assert runs_for(declared(steps, pure=False))[0] == 1
    assert runs_for(declared(steps, pure=False))[0] == 1


@pytest.mark.parametrize("change", ["step code", "step file", "sample", "warmup count"])
def test_a_change_to_what_the_run_follows_from_runs_it_again(steps: ModuleType, change: str) -> None:
    assert runs_for(declared(steps))[0] == 1
    folder = Path(steps.__file__).parent  # type: ignore[arg-type]
    value, count = 1.0, 1
    if change == "step code":
        with (folder / f"{steps.__name__}.py").open("a") as fh:
            fh.write("\n# edited\n")
    elif change == "step file":
        (folder / "table.txt").write_text("another table\n")
    elif change == "sample":
        value = 2.0
    else:
        count = 2
    ran, files = runs_for(declared(steps, value, count))
    assert ran == 1
    assert runs_for(declared(steps, value, count))[0] == 0  # and that is kept in turn
    if change == "sample":  # the warmup file holds the new payload's first row
        assert files[f"{declared(steps).name}__as_text/warmup/0_x"] == np.full(4, 2.0, "<f4").tobytes()


def test_step_code_its_file_no_longer_holds_runs_at_every_build(steps: ModuleType) -> None:
    """A notebook imported the step module, then its file was edited and not reloaded: the step runs its old
    code, and what that finds is not remembered under the file's new content."""
    assert runs_for(declared(steps))[0] == 1
    Path(steps.__file__).write_text(STEPS.replace("row.sum()", "row.sum() + 1"))  # type: ignore[arg-type]
    assert runs_for(declared(steps))[0] == 1
    assert runs_for(declared(steps))[0] == 1


def test_refresh_runs_it_again(steps: ModuleType) -> None:
    assert runs_for(declared(steps))[0] == 1
    assert runs_for(declared(steps), refresh=True)[0] == 1


@pytest.fixture
def no_local_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    """Python steps lay out for production only: the in-process run (the local target) cannot be made."""
    production = PythonStep.layout

    def layout(step: PythonStep, model: str, target: Target, release: Release, ensemble: str) -> StepLayout:
        if target is Target.LOCAL:
            raise BuildError(f"step {step.name!r}: no local layout in this test")
        return production(step, model, target, release, ensemble)

    monkeypatch.setattr(PythonStep, "layout", layout)


@pytest.mark.usefixtures("no_local_layout")
def test_a_warmup_whose_local_plan_cannot_be_made_fails_the_production_build(steps: ModuleType) -> None:
    with pytest.raises(BuildError, match=r"warmup from sample 'one': running it failed: "
                                         r"ensemble '\w+': step 'as_text': no local layout in this test"):
        render_repository(declared(steps), "production", "24.10")


@pytest.mark.usefixtures("no_local_layout")
def test_samples_whose_local_plan_cannot_be_made_leave_sizes_unmeasured(steps: ModuleType) -> None:
    ens = declared(steps)
    ens.warmup_request = None  # the samples alone: sizing shared memory is not worth failing the build
    shm = render_repository(ens, "production", "24.10").manifest["shm"]
    assert shm["unknown"] == [f"{ens.name}__as_text output t"]
    assert shm["unmeasured"] == (f"running the samples failed: ensemble {ens.name!r}: step "
                                 "'as_text': no local layout in this test")


def test_an_in_memory_file_is_hashed_once_in_a_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same bytes go through the step's check record, the in-process run's key and the manifest: their
    sha256 is taken once (counted through buildcache.sha256), and the manifest records it."""
    import basic_steps

    from conch.builder import buildcache

    monkeypatch.setenv("CONCH_CACHE_DIR", str(tmp_path / "cache"))
    payload = np.random.default_rng(0).bytes(1 << 16)
    ens = Ensemble("hashed_once", max_batch_size=8)
    step = PythonStep("double", basic_steps.double, inputs=[Tensor("x", "FP32", [4])],
                      outputs=[Tensor("y", "FP32", [4])],
                      files={"weights.bin": payload}, max_batch_size=8)
    ens.output("Y", step(ens.input("X", "FP32", [4])))
    ens.sample("one", {"X": np.ones((1, 4), np.float32)}, {"Y": np.full((1, 4), 2, np.float32)})
    ens.warmup("one")
    real, hashed = buildcache.sha256, []

    def counted(source: bytes | Path) -> str:
        hashed.append(source is payload)
        return real(source)

    monkeypatch.setattr(buildcache, "sha256", counted)
    runs = observe.runs
    repo = render_repository(ens, Target.LOCAL, Release.of("24.10"))
    assert observe.runs == runs + 1  # the run's key was taken (and the run made)
    assert hashed.count(True) == 1
    assert repo.manifest["files"]["hashed_once__double/1/files/weights.bin"] == real(payload)


IMPORTS = """import numpy as np
import {module}


def as_text(x):
    return {{"t": np.array([[str(float(row.sum()))] for row in x], dtype=object)}}
"""


def importing(steps: ModuleType, module: str) -> ModuleType:
    """A step module beside ``steps`` whose code imports ``module`` at its top."""
    folder = Path(steps.__file__).parent  # type: ignore[arg-type]
    name = f"{steps.__name__}_{module}"
    (folder / f"{name}.py").write_text(IMPORTS.format(module=module))
    return importlib.import_module(name)


def test_a_step_importing_a_module_of_a_newer_python_fails_the_warmup_on_the_images_python(steps: ModuleType) -> None:
    """tomllib is in 3.11's standard library (conch's Python here): the 24.10 image runs 3.10, where it is not."""
    with pytest.raises(BuildError, match=r"warmup from sample 'one': running it failed: ensemble "
                       r"'\w+', step 'as_text' \(python\): loading it on Python 3.10 \(the 24.10 image's, with "
                       r"the image's packages only\) failed: ModuleNotFoundError: No module named 'tomllib'; the "
                       r"standard library has tomllib from Python 3.11, and Triton 24.10's image runs Python 3.10: "
                       r"use a package that provides it on 3.10 in the step's environment \(env=conch.PythonEnv"):
        render_repository(declared(importing(steps, "tomllib")), "local", "24.10")


def test_the_same_step_builds_for_a_release_whose_python_has_it(steps: ModuleType) -> None:
    repo = render_repository(declared(importing(steps, "tomllib")), "local", "24.11")  # Python 3.12
    assert any(name.endswith("/warmup/0_x") for name in repo.files)


def test_a_step_importing_a_package_only_conchs_python_has_fails_the_warmup(steps: ModuleType) -> None:
    with pytest.raises(BuildError, match=r"failed: ModuleNotFoundError: No module named 'yaml'; the image's Python "
                       r"holds its standard library, numpy, pip, setuptools, wheel and virtualenv, and the step has "
                       r"no environment: it fails with ModuleNotFoundError on SageMaker too; give the step an "
                       r'environment that holds it: env=conch.PythonEnv\(requirements=\["PyYAML"\]\)'):
        render_repository(declared(importing(steps, "yaml")), "production", "24.10")


@pytest.fixture
def no_image_python(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine where no interpreter of Python 3.10 is found (none in pyenv, uv, conda or on PATH)."""
    for name in ("PYENV_ROOT", "UV_PYTHON_INSTALL_DIR", "HOME"):
        monkeypatch.setenv(name, str(tmp_path / "none"))
    monkeypatch.delenv("CONDA_PREFIX", raising=False)
    monkeypatch.delenv("CONCH_PYTHON_3_10", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("CI", raising=False)


@pytest.mark.usefixtures("no_image_python")
def test_without_the_images_python_the_build_runs_conchs_and_says_so_once(steps: ModuleType) -> None:
    from conch.builder import repository_build

    said: list[str] = []
    repository_build._said.clear()
    for _ in range(2):
        render_repository(declared(importing(steps, "tomllib"), pure=False), "local", "24.10", progress=said.append)
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert [line for line in said if "observe runs" in line] == [
        f"warning: the build's observe runs (warmup, shared-memory sizing) ran on {here}; the 24.10 image runs 3.10 "
        "(no Python 3.10 found: install one with pyenv, uv or conda, or give --python PATH or CONCH_PYTHON_3_10)"]


@pytest.mark.usefixtures("no_image_python")
def test_without_the_images_python_strict_fails_the_build(steps: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(BuildError, match=r"ensemble '\w+': the build's observe runs \(warmup, shared-memory sizing\) "
                       r"ran on 3.\d+; the 24.10 image runs 3.10 .*; --strict \(and CI\) refuse to run the Python "
                       r"steps on another Python than the image's"):
        render_repository(declared(steps), "local", "24.10")


def test_the_observation_key_covers_the_python_the_steps_run_on(steps: ModuleType) -> None:
    from conch.builder.observe import image_python, observation_key
    from conch.compiler.compiled import compile_ensemble

    for release in ("24.10", "24.11"):
        local = compile_ensemble(declared(steps), "local", release)
        python, note = image_python(local)
        assert python is not None and note == ""
        assert python.version == Release.of(release).stub_python
        assert observation_key(Target.LOCAL, local, True, python=python) != observation_key(Target.LOCAL, local, True)


def test_without_a_package_index_the_build_runs_the_steps_here_and_says_so(
        steps: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The image environment cannot be built (no index, nothing kept): the build goes on, as before issue 39."""
    from conch.builder import repository_build

    monkeypatch.setenv("CONCH_IMAGE_PYTHON_DIR", str(tmp_path / "no-image-envs"))
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("CONCH_STRICT_PYTHON", raising=False)
    for name, value in (("PIP_INDEX_URL", "http://127.0.0.1:9/simple"), ("PIP_RETRIES", "0"), ("PIP_TIMEOUT", "1"),
                        ("PIP_NO_CACHE_DIR", "1"), ("PIP_FIND_LINKS", "")):
        monkeypatch.setenv(name, value)
    said: list[str] = []
    repository_build._said.clear()
    render_repository(declared(steps, pure=False), "local", "24.10", progress=said.append)
    assert any(line.startswith("warning: the build's observe runs (warmup, shared-memory sizing) ran the Python "
                               "steps in conch's process: the environment of Triton 24.10's image Python could not "
                               "be built (could not install the image's Python packages") for line in said)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(BuildError, match=r"--strict \(and CI\) refuse to run the Python steps otherwise than as "
                       r"the image runs them"):
        render_repository(declared(steps, pure=False), "local", "24.10")
