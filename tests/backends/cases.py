"""One BackendCase per backend: a small real step, its production layout, a payload for its local
stand-in, and wrong declarations that the build must refuse. Adding a backend = adding a case here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import basic_steps
import dali_pipelines
import numpy as np
import onnx_models
import tf_graphs
import torch_modules

from conch import DaliStep, OnnxStep, PythonStep, Tensor, TensorFlowStep, TensorRTStep, TorchScriptStep
from conch.ensembles.step import Step


@dataclass
class BackendCase:
    kind: str
    make: Callable[[Path], Step]  # a working step; artifacts go in the given folder
    served_as: str  # platform or backend string in production
    files: set[str]  # production files in the model folder, besides config.pbtxt
    inputs: dict[str, np.ndarray]  # one request for the local stand-in (batch first)
    expected: dict[str, np.ndarray]
    wrong: list[tuple[Callable[[Path], Step], str]] = field(default_factory=list)  # (step, error regex)
    atol: float = 1e-5


X = np.arange(8, dtype=np.float32).reshape(2, 4)


def _onnx(tmp: Path, **kw) -> OnnxStep:  # type: ignore[no-untyped-def]
    return OnnxStep("affine", onnx_models.affine(tmp / "affine.onnx"), max_batch_size=8, **kw)


def _dali(inputs: list[Tensor], outputs: list[Tensor] | None = None) -> DaliStep:
    outputs = outputs or [Tensor("DALI_OUTPUT_0", "FP32", [4])]
    return DaliStep("affine", dali_pipelines.affine, inputs=inputs, outputs=outputs, max_batch_size=8, num_threads=2)


# A model.plan can only be built and read on a GPU; the production layout ships these bytes as they are.
OPAQUE_PLAN = b"prebuilt TensorRT engine bytes"


def _tensorrt(tmp: Path, inputs: list[Tensor], outputs: list[Tensor] | None = None) -> TensorRTStep:
    return TensorRTStep("affine", plan=OPAQUE_PLAN, source=onnx_models.affine(tmp / "a.onnx"), max_batch_size=8,
                        inputs=inputs, outputs=outputs or [Tensor("y", "FP32", [4])])


def _tensorflow(inputs: list[Tensor]) -> TensorFlowStep:
    return TensorFlowStep("affine", tf_graphs.affine(), max_batch_size=8, inputs=inputs,
                          outputs=[Tensor("affine/y", "FP32", [4])])


def _torch(inputs: list[Tensor], outputs: list[Tensor] | None = None) -> TorchScriptStep:
    return TorchScriptStep("affine", torch_modules.affine(), inputs=inputs,
                           outputs=outputs or [Tensor("OUTPUT__0", "FP32", [4])],
                           max_batch_size=8)


CASES = [
    BackendCase(
        kind="python",
        make=lambda tmp: PythonStep("double", basic_steps.double, inputs=[Tensor("x", "FP32", [4])],
                                    outputs=[Tensor("y", "FP32", [4])], max_batch_size=8),
        served_as="python",
        files={"1/model.py", "1/basic_steps.py"},
        inputs={"x": X},
        expected={"y": X * 2},
        wrong=[
            (lambda tmp: PythonStep("double", basic_steps.double, inputs=[Tensor("x", "FP32", [4])],
                                    outputs=[Tensor("y", "FP32", [4])], files={"missing.txt": tmp / "missing.txt"}),
             r"python step 'double': file 'missing.txt' points at .*missing.txt, which does not exist"),
        ],
    ),
    BackendCase(
        kind="onnx",
        make=_onnx,
        served_as="onnxruntime_onnx",
        files={"1/model.onnx"},
        inputs={"x": X},
        expected={"y": X * 2 + 1},
        wrong=[
            (lambda tmp: OnnxStep("affine", onnx_models.affine(tmp / "a.onnx"), max_batch_size=8,
                                  inputs=[Tensor("x", "INT64", [4])], outputs=[Tensor("y", "FP32", [4])]),
             r"step 'affine': input 'x' is declared INT64 but a.onnx has FP32"),
            (lambda tmp: OnnxStep("affine", onnx_models.affine(tmp / "a.onnx"), max_batch_size=8,
                                  inputs=[Tensor("x", "FP32", [5])], outputs=[Tensor("y", "FP32", [4])]),
             r"step 'affine': input 'x' is declared with dims \[5\] but a.onnx has \[4\]"),
            (lambda tmp: OnnxStep("affine", onnx_models.affine(tmp / "a.onnx"), max_batch_size=8,
                                  inputs=[Tensor("input", "FP32", [4])], outputs=[Tensor("y", "FP32", [4])]),
             r"step 'affine': input 'input' is not in a.onnx, whose inputs are 'x'"),
            (lambda tmp: OnnxStep("affine", lambda: tmp / "nope.onnx", max_batch_size=8,
                                  inputs=[Tensor("x", "FP32", [4])], outputs=[Tensor("y", "FP32", [4])]),
             r"onnx step 'affine': model file .*nope.onnx does not exist"),
        ],
    ),
    BackendCase(
        kind="dali",
        make=lambda tmp: _dali([Tensor("DALI_INPUT_0", "FP32", [4])]),
        served_as="dali",
        files={"1/model.dali"},
        inputs={"DALI_INPUT_0": X},
        expected={"DALI_OUTPUT_0": X * 2 + 1},
        wrong=[
            (lambda tmp: _dali([Tensor("DALI_INPUT_0", "INT32", [4])]),
             r"dali step 'affine': input 'DALI_INPUT_0' is declared INT32 but the pipeline's external_source "
             r"'DALI_INPUT_0' has dtype FP32"),
            (lambda tmp: _dali([Tensor("DALI_INPUT_0", "FP32", [2, 2])]),
             r"dali step 'affine': input 'DALI_INPUT_0' is declared with dims \[2, 2\] \(2 per sample\) but the "
             r"pipeline's external_source 'DALI_INPUT_0' has ndim=1"),
            (lambda tmp: _dali([Tensor("IMAGES", "FP32", [4])]),
             r"dali step 'affine': input 'IMAGES' is not an external_source of the pipeline, whose external "
             r"sources are 'DALI_INPUT_0'"),
            (lambda tmp: _dali([Tensor("DALI_INPUT_0", "FP32", [4])],
                               [Tensor("A", "FP32", [4]), Tensor("B", "FP32", [4])]),
             r"dali step 'affine': the pipeline returns 1 output\(s\) but the step declares 2"),
        ],
    ),
    BackendCase(
        kind="tensorrt",
        make=lambda tmp: _tensorrt(tmp, [Tensor("x", "FP32", [4])]),
        served_as="tensorrt_plan",
        files={"1/model.plan"},
        inputs={"x": X},
        expected={"y": X * 2 + 1},
        wrong=[
            (lambda tmp: _tensorrt(tmp, [Tensor("x", "FP16", [4])]),
             r"step 'affine': input 'x' is declared FP16 but a.onnx has FP32"),
            (lambda tmp: _tensorrt(tmp, [Tensor("x", "FP32", [3])]),
             r"step 'affine': input 'x' is declared with dims \[3\] but a.onnx has \[4\]"),
            (lambda tmp: _tensorrt(tmp, [Tensor("input", "FP32", [4])]),
             r"step 'affine': input 'input' is not in a.onnx, whose inputs are 'x'"),
        ],
    ),
    BackendCase(
        kind="tensorflow",
        make=lambda tmp: TensorFlowStep("affine", tf_graphs.affine(), max_batch_size=8),
        served_as="tensorflow_graphdef",
        files={"1/model.graphdef"},
        inputs={"inputs/x": X},
        expected={"affine/y": X * 2 + 1},
        wrong=[
            (lambda tmp: _tensorflow([Tensor("inputs/x", "FP64", [4])]),
             r"step 'affine': input 'inputs/x' is declared FP64 but model.graphdef has FP32"),
            (lambda tmp: _tensorflow([Tensor("inputs/x", "FP32", [4, 1])]),
             r"step 'affine': input 'inputs/x' is declared with dims \[4, 1\] but model.graphdef has \[4\]"),
            (lambda tmp: _tensorflow([Tensor("x", "FP32", [4])]),
             r"step 'affine': input 'x' is not in model.graphdef, whose inputs are 'inputs/x'"),
        ],
    ),
    BackendCase(
        kind="pytorch",
        make=lambda tmp: _torch([Tensor("INPUT__0", "FP32", [4])]),
        served_as="pytorch_libtorch",
        files={"1/model.pt"},
        inputs={"INPUT__0": X},
        expected={"OUTPUT__0": X * 2 + 1},
        wrong=[
            (lambda tmp: _torch([Tensor("INPUT__0", "INT64", [4])]),
             r"pytorch step 'affine': running model.pt on zeros shaped like the declared inputs "
             r"\(INPUT__0: INT64 \[2, 4\]\) failed: RuntimeError: .*dtype"),
            (lambda tmp: _torch([Tensor("INPUT__0", "FP32", [5])]),
             r"pytorch step 'affine': running model.pt on zeros .*\(INPUT__0: FP32 \[2, 5\]\) failed: "
             r"RuntimeError: mat1 and mat2 shapes cannot be multiplied"),
            (lambda tmp: _torch([Tensor("INPUT__0", "FP32", [4])], [Tensor("OUTPUT__0", "FP16", [4])]),
             r"pytorch step 'affine': output 'OUTPUT__0' is declared FP16 but model.pt returns FP32"),
            (lambda tmp: _torch([Tensor("input", "FP32", [4])]),
             r"pytorch step 'affine': input 'input' is not an argument of forward\(\) in model.pt \(its "
             r"arguments are 'x'\)"),
        ],
    ),
]
