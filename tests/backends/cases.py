"""One BackendCase per backend: a small real step, its production layout, a payload for its local
stand-in, and wrong declarations that the build must refuse. Adding a backend = adding a case here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import basic_steps
import numpy as np
import onnx_models

from conch import OnnxStep, PythonStep, Tensor
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


CASES = [
    BackendCase(
        kind="python",
        make=lambda tmp: PythonStep("double", basic_steps.double, [Tensor("x", "FP32", [4])],
                                    [Tensor("y", "FP32", [4])], max_batch_size=8),
        served_as="python",
        files={"1/model.py", "1/basic_steps.py"},
        inputs={"x": X},
        expected={"y": X * 2},
        wrong=[
            (lambda tmp: PythonStep("double", basic_steps.double, [Tensor("x", "FP32", [4])],
                                    [Tensor("y", "FP32", [4])], files={"missing.txt": tmp / "missing.txt"}),
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
]
