"""ONNX steps read their I/O from the file, and refuse files Triton's ONNX Runtime backend cannot serve as
declared: a fixed batch axis under max_batch_size > 0, scalars that cannot batch, element types Triton
lacks, weights in external data files (the archive carries model.onnx alone), unreadable files."""

from __future__ import annotations

from pathlib import Path

import onnx
import onnx_models
import pytest
from onnx import TensorProto

from conch import BuildError, DeclarationError, OnnxStep, Tensor


def test_io_is_read_from_the_file_without_the_batch_axis(tmp_path: Path) -> None:
    step = OnnxStep("affine", onnx_models.affine(tmp_path / "a.onnx"), max_batch_size=8)
    assert [(t.name, t.dtype.wire, t.dims) for t in (*step.inputs, *step.outputs)] == [
        ("x", "FP32", (4,)), ("y", "FP32", (4,))]
    unbatched = OnnxStep("affine", tmp_path / "a.onnx")
    assert [t.dims for t in unbatched.inputs] == [(-1, 4)]


def test_a_fixed_batch_axis_is_refused_when_batching(tmp_path: Path) -> None:
    fixed = onnx_models.affine(tmp_path / "fixed.onnx", batch_dynamic=False)
    with pytest.raises(BuildError, match=r"onnx step 'affine': tensor 'x' has a fixed first dimension 1, but "
                                         r"max_batch_size > 0 needs a dynamic batch axis; export with dynamic axes"):
        OnnxStep("affine", fixed, max_batch_size=8)
    assert [t.dims for t in OnnxStep("affine", fixed).inputs] == [(1, 4)]  # fine without batching


def test_a_scalar_cannot_batch(tmp_path: Path) -> None:
    scalar = onnx_models.identity(tmp_path / "s.onnx", TensorProto.FLOAT, [])
    with pytest.raises(BuildError, match=r"tensor 'x' is a scalar, so it cannot batch"):
        OnnxStep("scalar", scalar, max_batch_size=8)


def test_an_element_type_triton_lacks_is_refused(tmp_path: Path) -> None:
    complex_io = onnx_models.identity(tmp_path / "c.onnx", TensorProto.COMPLEX64, ["batch", 2])
    with pytest.raises(BuildError, match=r"onnx step 'c': tensor 'x' has an element type Triton lacks"):
        OnnxStep("c", complex_io, max_batch_size=8)


def test_weights_in_external_data_files_are_refused(tmp_path: Path) -> None:
    model = onnx.load(str(onnx_models.affine(tmp_path / "a.onnx")))
    onnx.save(model, str(tmp_path / "external.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
              location="weights.bin", size_threshold=0)
    assert (tmp_path / "weights.bin").is_file()
    with pytest.raises(BuildError, match=r"external.onnx keeps weights in external data files; save it as one "
                                         r"file \(onnx.save\(model, path, save_as_external_data=False\)\)"):
        OnnxStep("affine", tmp_path / "external.onnx", max_batch_size=8)


def test_a_file_that_is_not_onnx_is_refused(tmp_path: Path) -> None:
    (tmp_path / "model.onnx").write_bytes(b"not a protobuf at all \xff\xfe")
    with pytest.raises(BuildError, match=r"onnx step 'bad': cannot read .*model.onnx"):
        OnnxStep("bad", tmp_path / "model.onnx")


def test_a_model_function_needs_declared_io(tmp_path: Path) -> None:
    with pytest.raises(DeclarationError, match=r"onnx step 'later': model is a function, so declare inputs= and "
                                               r"outputs="):
        OnnxStep("later", lambda: tmp_path / "a.onnx", max_batch_size=8)
    declared = OnnxStep("later", lambda: onnx_models.affine(tmp_path / "a.onnx"), max_batch_size=8,
                        inputs=[Tensor("x", "FP32", [4])], outputs=[Tensor("y", "FP32", [4])])
    assert declared.name == "later"
