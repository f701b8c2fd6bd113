"""Calling a step with nothing to bind, or with something that is not a tensor handle, is refused where it
is written, naming the step (through ``step(...)`` and the public ``Ensemble.call``)."""

from __future__ import annotations

import basic_steps
import pytest

from conch import DeclarationError, Ensemble, PythonStep, Tensor


def _step() -> PythonStep:
    return PythonStep("double", basic_steps.double, inputs=[Tensor("x", "FP32", [4], optional=True)],
                      outputs=[Tensor("y", "FP32", [4])], max_batch_size=4)


def test_a_step_called_with_no_handle_says_to_pass_one() -> None:
    ens = Ensemble("calls", max_batch_size=4)
    for call in (lambda: _step()(), lambda: ens.call(_step())):
        with pytest.raises(DeclarationError, match=r"^step 'double': call it with at least one tensor handle$"):
            call()


@pytest.mark.parametrize("value", [3, "x", [1.0, 2.0]], ids=["int", "str", "list"])
def test_a_step_input_that_is_not_a_handle_names_what_it_got(value: object) -> None:
    ens = Ensemble("calls", max_batch_size=4)
    expected = (rf"^step 'double': inputs must be tensor handles \(from ensemble.input\(\) or another step\), "
                rf"got {type(value).__name__}$")
    with pytest.raises(DeclarationError, match=expected):
        _step()(value)
    with pytest.raises(DeclarationError, match=expected):
        ens.call(_step(), x=value)
