"""`conch.run` runs each step through its local Python-backend model; a step of a backend added without a
CPU stand-in cannot run in the process, and the error names the ensemble, the step and its backend."""

from __future__ import annotations

import numpy as np
import pytest

import conch
from conch import Ensemble, RunError, Tensor
from conch.ensembles.config import StepSettings
from conch.ensembles.step import Step, StepLayout
from conch.ensembles.target import Release, Target


class OpenVinoStep(Step):
    """A backend a user adds (README: "Adding a backend") that lays out the same model for every target."""

    kind = "openvino"

    def layout(self, model_name: str, target: Target, release: Release, ensemble: str) -> StepLayout:
        return StepLayout(self.spec(model_name, backend="openvino"), {"1/model.xml": b"<net/>"})


def test_a_step_whose_local_layout_is_not_a_python_model_cannot_run_in_process() -> None:
    step = OpenVinoStep("detector", [Tensor("x", "FP32", [4])], [Tensor("y", "FP32", [4])], StepSettings.of(4))
    ens = Ensemble("vision", max_batch_size=4)
    ens.output("Y", step(ens.input("X", "FP32", [4])))
    with pytest.raises(RunError, match=r"ensemble 'vision', step 'detector' \(openvino\): has no CPU path to run in "
                                       r"this process \(its local layout is not a Python-backend model\)"):
        conch.run(ens, {"X": np.ones((1, 4), np.float32)})
