"""PythonModelStep: a Python-backend model written by hand, laid out as it is (its config rendered from the
declaration), with an environment beside the model folders kept where the config names it."""

from __future__ import annotations

from pathlib import Path

import pytest

from conch import BuildError, DeclarationError, Ensemble, PythonModelStep, Tensor
from conch.builder.repository_build import render_repository

IO = {"inputs": [Tensor("x", "FP32", [4])], "outputs": [Tensor("y", "FP32", [4])]}


def _folder(root: Path) -> Path:
    (root / "1").mkdir(parents=True)
    (root / "1/model.py").write_text("class TritonPythonModel:\n    pass\n")
    (root / "1/helpers/lookup.json").parent.mkdir()
    (root / "1/helpers/lookup.json").write_text("{}")
    (root / "config.pbtxt").write_text("ignored: conch renders it")
    return root


def _repository(step: PythonModelStep, target: str = "production") -> dict[str, object]:
    ens = Ensemble("hand", max_batch_size=4, step_prefix="")
    ens.output("Y", step(ens.input("X", "FP32", [4])))
    return render_repository(ens, target, "24.10").files


def test_the_folder_is_laid_out_as_it_is_with_the_environment_beside(tmp_path: Path) -> None:
    env = tmp_path / "shared-env.tar.gz"
    env.write_bytes(b"packed")
    step = PythonModelStep("scale", _folder(tmp_path / "scale"), **IO, max_batch_size=4,
                           parameters={"EXECUTION_ENV_PATH": "$$TRITON_MODEL_DIRECTORY/../envs/shared-env.tar.gz"},
                           beside={"envs/shared-env.tar.gz": env})
    files = _repository(step)
    assert {k for k in files if k.startswith(("scale/", "envs/"))} == {
        "scale/config.pbtxt", "scale/1/model.py", "scale/1/helpers/lookup.json", "envs/shared-env.tar.gz"}
    assert b"EXECUTION_ENV_PATH" in files["scale/config.pbtxt"]  # type: ignore[operator]
    local = _repository(step, "local")  # kept as production keeps it: the local stub runs the release's Python
    assert local["envs/shared-env.tar.gz"] == env
    assert b"EXECUTION_ENV_PATH" in local["scale/config.pbtxt"]  # type: ignore[operator]


def test_a_folder_without_a_model_py_is_refused(tmp_path: Path) -> None:
    with pytest.raises(DeclarationError, match=r"python_model step 'scale': model folder .* does not exist"):
        PythonModelStep("scale", tmp_path / "missing", **IO)
    (tmp_path / "empty").mkdir()
    with pytest.raises(DeclarationError, match=r"has no <version>/model.py \(e.g. 1/model.py"):
        PythonModelStep("scale", tmp_path / "empty", **IO)


def test_a_beside_file_must_stay_in_the_archive_and_exist(tmp_path: Path) -> None:
    folder = _folder(tmp_path / "scale")
    with pytest.raises(DeclarationError, match="beside file '../etc/passwd' must be a relative path inside"):
        PythonModelStep("scale", folder, **IO, beside={"../etc/passwd": tmp_path})
    step = PythonModelStep("scale", folder, **IO, max_batch_size=4, beside={"envs/e.tar.gz": tmp_path / "nope"})
    with pytest.raises(BuildError, match="beside file 'envs/e.tar.gz' points at .*nope, which does not exist"):
        _repository(step)
