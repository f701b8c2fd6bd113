"""Python-backend code judged against the release's image Python before anything loads: `conch check` (archives,
model folders) and `conch build` name each import that neither the image's Python (its standard library, numpy,
pip, setuptools, wheel, virtualenv) nor the model's environment nor its own folders provide, with the file, the
line and the fix; code that does not compile under the release's Python is refused with the compiler's words."""

from __future__ import annotations

import importlib
import io
import sys
import tarfile
from pathlib import Path

import pytest
from seed_archives import pack_repo
from single_models import ADD_SUB_CONFIG, ADD_SUB_MODEL, write_repo

from conch import Ensemble, PythonStep, Tensor
from conch.archive.import_scan import scan_source
from conch.archive.manifest import read_manifest
from conch.archive.python_imports import environment_names
from conch.archive.verify import check_repository, checked
from conch.builder.repository_build import build_ensemble
from conch.cli import main
from conch.errors import BuildError
from conch.image_python import find_interpreter, image_packages, stdlib_modules, stdlib_since

YAML_STEPS = '''import numpy as np
import yaml

try:
    import ujson
except ImportError:
    ujson = None


def parse(x):
    return x * 2


def config(x):
    import tomllib
    return x + 1
'''


def steps_module(tmp_path: Path, name: str, text: str) -> object:
    code = tmp_path / "code"
    code.mkdir(exist_ok=True)
    (code / f"{name}.py").write_text(text)
    sys.path.insert(0, str(code))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(code))
        sys.modules.pop(name, None)


def one_step(name: str, code: object, release: str, tmp_path: Path, target: str = "production") -> Path:
    ens = Ensemble(name, max_batch_size=4)
    step = PythonStep("step", code, [Tensor("x", "FP32", [2])], [Tensor("y", "FP32", [2])],  # type: ignore[arg-type]
                      max_batch_size=4)
    ens.output("Y", step(ens.input("X", "FP32", [2])))
    return build_ensemble(ens, tmp_path / "dist", target, release=release)


def test_a_production_build_importing_a_package_without_env_is_named_by_check_with_file_line_and_fix(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    module = steps_module(tmp_path, "yaml_steps", YAML_STEPS)
    archive = one_step("yaml_ens", module.parse, "24.10", tmp_path)  # type: ignore[attr-defined]
    assert main(["check", str(archive)]) == 1
    out = capsys.readouterr().out
    assert ("yaml_ens.tar.gz/yaml_ens__step/1/yaml_steps.py: error: line 2: imports yaml, which Triton 24.10's image "
            "Python 3.10 does not provide (its standard library, numpy, pip, setuptools, wheel, virtualenv), and the "
            "model has no environment (EXECUTION_ENV_PATH): it fails with ModuleNotFoundError on SageMaker; give the "
            "step an environment that holds it: env=conch.PythonEnv(requirements=[\"PyYAML\"]) (a hand-written "
            "model: an EXECUTION_ENV_PATH environment)") in out
    assert "ujson" not in out  # under try/except ImportError: optional
    assert ("yaml_steps.py: error: line 15: imports tomllib, which the standard library has from Python 3.11: Triton "
            "24.10's image runs Python 3.10, which lacks it (ModuleNotFoundError at load); use a package that "
            "provides it on 3.10 in the step's environment (env=conch.PythonEnv(requirements=[...])), or build for a "
            "release whose Python has it") in out


def test_the_build_names_them_too_and_a_release_whose_python_has_the_module_takes_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    module = steps_module(tmp_path, "toml_steps", "import tomllib\n\n\ndef config(x):\n    return x + 1\n")
    one_step("toml_ens", module.config, "24.10", tmp_path / "a")  # type: ignore[attr-defined]
    with checked(tmp_path / "a" / "dist" / "toml_ens.tar.gz") as (report, _):
        assert [f.message.split(",")[0] for f in report.errors] == ["line 1: imports tomllib"]
    newer = one_step("toml_ens", module.config, "24.11", tmp_path / "b")  # type: ignore[attr-defined]
    with checked(newer) as (report, _):
        assert report.ok, report.lines()


def test_code_that_does_not_compile_on_the_releases_python_is_refused_with_the_compilers_words(
        tmp_path: Path) -> None:
    if find_interpreter("3.10") is None:
        pytest.skip("no Python 3.10 on this machine (pyenv install 3.10)")
    text = ("def grouped(x):\n    try:\n        return x\n    except* ValueError:\n        raise\n")  # 3.11 syntax
    module = steps_module(tmp_path, "star_steps", text)
    with pytest.raises(BuildError, match=r"ensemble 'star_ens': star_ens__step/1/star_steps.py: does not compile on "
                       r"Python 3.10, which Triton 24.10's image runs it with: SyntaxError: .*\(line 4\); write it in "
                       r"Python 3.10's syntax"):
        one_step("star_ens", module.grouped, "24.10", tmp_path)  # type: ignore[attr-defined]


def test_a_hand_made_archive_is_judged_with_its_environment_and_by_the_releases_own_compiler(
        tmp_path: Path) -> None:
    if find_interpreter("3.10") is None or find_interpreter("3.12") is None:
        pytest.skip("needs Python 3.10 and 3.12 on this machine (pyenv)")
    env = io.BytesIO()
    with tarfile.open(fileobj=env, mode="w:gz") as tar:
        for name in ("bin/activate", "lib/python3.10/site-packages/yaml/__init__.py"):
            info = tarfile.TarInfo(name)
            tar.addfile(info, io.BytesIO(b""))
    model = ADD_SUB_MODEL.replace(b"import triton_python_backend_utils as pb_utils",
                                  b"import triton_python_backend_utils as pb_utils\nimport yaml\nfrom shapes import W\n"
                                  b"type Alias = int\n")
    config = ADD_SUB_CONFIG + 'parameters { key: "EXECUTION_ENV_PATH" value { string_value: ' \
        '"$$TRITON_MODEL_DIRECTORY/yaml_env.tar.gz" } }\n'
    repo = {"add_sub/config.pbtxt": config.encode(), "add_sub/1/model.py": model, "add_sub/1/shapes.py": b"W = 4\n",
            "add_sub/yaml_env.tar.gz": env.getvalue()}
    archive = pack_repo(repo, tmp_path / "add_sub.tar.gz")
    with checked(archive, "24.10") as (report, _):
        assert [(f.file, f.message.split(":")[0]) for f in report.errors] == [
            ("add_sub/1/model.py", "does not compile on Python 3.10, which Triton 24.10's image runs it with")]
    with checked(archive, "24.11") as (report, _):  # 3.12 compiles it; the environment holds yaml (a 3.10 one:
        assert [f.message for f in report.errors if "model.py" in f.file] == []  # the release check names that)
    folder = write_repo({**repo, "add_sub/1/model.py": model.replace(b"type Alias = int\n", b"import requests\n")},
                        tmp_path / "repo")
    report = check_repository(folder, "24.10")  # a model folder, as the archive it would become
    assert [f.message.split(",")[0] for f in report.errors] == ["line 4: imports requests"]
    assert "nor does its environment add_sub/yaml_env.tar.gz" in report.errors[0].message


def test_a_module_of_the_users_left_outside_the_step_modules_folder_is_named_where_it_is(tmp_path: Path) -> None:
    shared = tmp_path / "project"
    shared.mkdir()
    (shared / "project_consts.py").write_text("SCALE = 2\n")
    sys.path.insert(0, str(shared))
    try:
        module = steps_module(tmp_path, "far_steps", "import project_consts\n\n\ndef scale(x):\n"
                              "    return x * project_consts.SCALE\n")
        archive = one_step("far_ens", module.scale, "24.10", tmp_path)  # type: ignore[attr-defined]
    finally:
        sys.path.remove(str(shared))
        sys.modules.pop("project_consts", None)
    with checked(archive) as (_, folder):
        assert folder is not None
        notes = "\n".join(read_manifest(folder).notes)  # the build's warnings, kept in its manifest
    assert (f"far_ens__step/1/far_steps.py: line 1: imports project_consts, a module of yours at "
            f"{(shared / 'project_consts.py').resolve()}, which conch cannot ship: it copies only the modules beside "
            "the step's module (and packages there); move it beside the step's module, or make it a package "
            "installed in the step's environment (env=)") in notes


def test_the_module_lists_come_from_maintained_sources() -> None:
    assert "tomllib" not in stdlib_modules("3.10") and "tomllib" in stdlib_modules("3.12")
    assert "distutils" in stdlib_modules("3.10") and "distutils" not in stdlib_modules("3.12")
    assert stdlib_since("tomllib", "3.10") == "3.11" and stdlib_since("yaml", "3.10") is None
    assert {"numpy", "pip", "setuptools", "wheel", "virtualenv"} <= image_packages("24.10")
    assert "yaml" not in image_packages("24.11")


def test_optional_imports_are_told_from_required_ones() -> None:
    source = (b"import os\nif sys.version_info >= (3, 11):\n    import tomllib\nelse:\n    import tomli\n"
              b"try:\n    import ujson\nexcept (ImportError, OSError):\n    pass\nfrom . import sibling\n"
              b"def f():\n    import yaml.loader\n")
    assert scan_source(source, "m.py") == {"imports": [[1, "os", False], [3, "tomllib", True], [5, "tomli", True],
                                                       [7, "ujson", True], [12, "yaml.loader", False]]}


def test_an_environment_folder_names_what_its_site_packages_hold(tmp_path: Path) -> None:
    site = tmp_path / "env" / "lib" / "python3.10" / "site-packages"
    for name in ("yaml/__init__.py", "_yaml.cpython-310-x86_64-linux-gnu.so", "six.py", "PyYAML-6.0.dist-info/RECORD"):
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_text("")
    assert environment_names(tmp_path / "env") == {"yaml", "_yaml", "six"}
