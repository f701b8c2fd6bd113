"""`conch.run` runs each step through its local Python-backend model; a step of a backend added without a
CPU stand-in (its local layout is its own backend's model) cannot run in the process, and the error names
the ensemble, the step and its backend."""

from __future__ import annotations

import numpy as np
import pytest

import conch
from conch import Ensemble, RunError, Tensor
from conch.ensembles.config import StepSettings
from conch.ensembles.layout import Platform
from conch.ensembles.step import BackendFiles, Step
from conch.ensembles.target import Release


class NativeOnnxStep(Step):
    """A backend a user adds (docs/architecture.md: "Adding a backend") that runs on the server's own
    onnxruntime backend everywhere: its stand-in is itself, so its local layout is no Python-backend model."""

    kind = "onnx-native"
    platform = Platform.ONNXRUNTIME_ONNX

    def backend_files(self, model_name: str, release: Release, ensemble: str) -> BackendFiles:
        return BackendFiles({"1/model.onnx": b"not a real model"})

    def standin(self) -> Step:
        return self


def test_a_step_whose_local_layout_is_not_a_python_model_cannot_run_in_process() -> None:
    step = NativeOnnxStep("detector", [Tensor("x", "FP32", [4])], [Tensor("y", "FP32", [4])], StepSettings.of(4))
    ens = Ensemble("vision", max_batch_size=4)
    ens.output("Y", step(ens.input("X", "FP32", [4])))
    with pytest.raises(RunError, match=r"ensemble 'vision', step 'detector' \(onnx-native\): has no CPU path to run "
                                       r"in this process \(its local layout is not a Python-backend model\)"):
        conch.run(ens, {"X": np.ones((1, 4), np.float32)})
