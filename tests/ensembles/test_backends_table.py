"""The one table of Triton's backends (conch/ensembles/backends_table.py) against core r24.10's facts, and what
each former copy reads from it."""

from __future__ import annotations

from conch.ensembles.backends_table import (
    AUTOFILL_ENTRIES,
    BY_NAME,
    MODEL_FILES,
    PLATFORM_BACKENDS,
    STEPS,
    default_file,
    model_files,
)
from conch.ensembles.layout import Platform


def test_platforms_map_to_backends_as_core_does() -> None:
    """core src/model_config_utils.cc GetBackendTypeFromPlatform r24.10."""
    assert PLATFORM_BACKENDS == {"tensorflow_graphdef": "tensorflow", "tensorflow_savedmodel": "tensorflow",
                                 "tensorrt_plan": "tensorrt", "onnxruntime_onnx": "onnxruntime",
                                 "pytorch_libtorch": "pytorch"}


def test_autofill_looks_for_the_default_files_in_cores_order() -> None:
    """core AutoCompleteBackendFields r24.10: a savedmodel is a folder, a graphdef, plan or .pt a file, an onnx
    model either; DALI is not autofilled."""
    assert AUTOFILL_ENTRIES == (
        ("model.savedmodel/", "tensorflow", "tensorflow_savedmodel"), ("model.graphdef", "tensorflow",
                                                                       "tensorflow_graphdef"),
        ("model.plan", "tensorrt", "tensorrt_plan"), ("model.onnx", "onnxruntime", "onnxruntime_onnx"),
        ("model.onnx/", "onnxruntime", "onnxruntime_onnx"), ("model.xml", "openvino", ""),
        ("model.pt", "pytorch", "pytorch_libtorch"), ("model.py", "python", ""))
    assert not BY_NAME["dali"].autofilled


def test_every_platform_conch_writes_has_its_default_file_and_step() -> None:
    assert {p: default_file(p) for p in Platform if p is not Platform.ENSEMBLE} == {
        Platform.ONNXRUNTIME_ONNX: "model.onnx", Platform.TENSORRT_PLAN: "model.plan",
        Platform.TENSORFLOW_GRAPHDEF: "model.graphdef", Platform.PYTORCH_LIBTORCH: "model.pt",
        Platform.PYTHON: "model.py", Platform.DALI: "model.dali"}
    assert set(STEPS) == set(Platform) - {Platform.ENSEMBLE}
    assert STEPS[Platform.PYTHON] == ("PythonModelStep", None)  # a Python model is its folder


def test_the_files_checked_are_those_of_backends_conch_has_a_step_for() -> None:
    assert MODEL_FILES["pytorch"] == MODEL_FILES["pytorch_libtorch"] == ("model.pt",)  # libtorch, the default
    assert MODEL_FILES["dali"] == ("model.dali", "dali.py")  # dali_backend's autoserialization
    assert "openvino" not in MODEL_FILES and "tensorflow" not in MODEL_FILES


def test_pytorchs_python_runtime_loads_model_py_or_model_pt() -> None:
    """pytorch_backend src/model.py _get_model_path r24.10; libtorch (src/libtorch.cc) loads model.pt alone."""
    for kind in ("pytorch", "pytorch_libtorch"):
        assert model_files(kind, "model.py") == ("model.py", "model.pt")
        assert model_files(kind) == ("model.pt",)
    assert model_files("python", "model.py") == ("model.py",)
    assert model_files("mystery") == ()
