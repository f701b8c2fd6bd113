"""Settings given in the wrong shape are refused where they are declared, naming the step or tensor, the
setting and what to give instead."""

from __future__ import annotations

import basic_steps
import pytest

from conch import DeclarationError, PythonStep, Tensor


def test_warmup_given_as_a_dict_says_to_use_conch_warmup() -> None:
    with pytest.raises(DeclarationError, match=r"python step 'double': warmup takes conch.Warmup values, got "
                                               r"\{'name': 'w'\}"):
        PythonStep("double", basic_steps.double, inputs=[Tensor("x", "FP32", [4])], outputs=[Tensor("y", "FP32", [4])],
                   max_batch_size=4, warmup=[{"name": "w"}])


@pytest.mark.parametrize("dims", ["4", 4])
def test_dims_given_as_one_value_says_to_give_a_list(dims: object) -> None:
    with pytest.raises(DeclarationError, match=rf"tensor 'x': dims must be a list of whole numbers, got {dims!r}"):
        Tensor("x", "FP32", dims)  # type: ignore[arg-type]
