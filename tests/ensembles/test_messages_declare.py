"""The declaration mistakes a data scientist makes, and what `conch run` says when a step's code returns
the wrong thing: each refusal triggered for real, its message asserted."""

from __future__ import annotations

import re
from pathlib import Path

import basic_steps
import numpy as np
import pytest

import conch
from conch import BuildError, DeclarationError, Ensemble, PythonEnv, PythonStep, RunError, Tensor


def one_step(code, inputs: list[Tensor], outputs: list[Tensor], **kw) -> Ensemble:  # type: ignore[no-untyped-def]
    """An ensemble `e` of one step `s` whose inputs are ensemble inputs of the same names."""
    ens = Ensemble("e", max_batch_size=4)
    step = PythonStep("s", code, inputs=inputs, outputs=outputs, max_batch_size=4, **kw)
    handles = {t.name: ens.input(t.name.upper(), t.dtype, t.dims) for t in inputs}
    result = step(**handles)
    outs = result if isinstance(result, tuple) else (result,)
    for t, h in zip(outputs, outs, strict=True):
        ens.output(t.name.upper(), h)
    return ens


def test_a_step_called_with_more_handles_than_inputs_names_its_inputs() -> None:
    ens = Ensemble("e", max_batch_size=4)
    step = PythonStep("dbl", basic_steps.double, inputs=[Tensor("x", "FP32", [4])], outputs=[Tensor("y", "FP32", [4])],
                      max_batch_size=4)
    a, b = ens.input("A", "FP32", [4]), ens.input("B", "FP32", [4])
    with pytest.raises(DeclarationError, match=re.escape("step 'dbl' takes 1 inputs (x), got 2 positional handles")):
        step(a, b)


def test_an_ensemble_output_declared_with_another_dtype_than_its_tensor() -> None:
    ens = Ensemble("e", max_batch_size=4)
    step = PythonStep("dbl", basic_steps.double, inputs=[Tensor("x", "FP32", [4])], outputs=[Tensor("y", "FP32", [4])],
                      max_batch_size=4)
    y = step(ens.input("X", "FP32", [4]))
    with pytest.raises(DeclarationError, match=re.escape(
            "ensemble 'e' output 'Y': declared INT32 but output 'y' of step 'dbl' is FP32")):
        ens.output("Y", y, dtype="INT32")


def test_a_step_input_fed_a_tensor_of_another_dtype() -> None:
    ens = Ensemble("e", max_batch_size=4)
    step = PythonStep("dbl", basic_steps.double, inputs=[Tensor("x", "FP32", [4])], outputs=[Tensor("y", "FP32", [4])],
                      max_batch_size=4)
    with pytest.raises(DeclarationError, match=re.escape(
            "ensemble 'e', step 'dbl', input 'x': expects FP32 but ensemble input 'X' is INT32; convert it in a "
            "step before, or fix the declared dtype")):
        step(ens.input("X", "INT32", [4]))


def linear() -> Ensemble:
    return one_step(basic_steps.double, [Tensor("x", "FP32", [4])], [Tensor("y", "FP32", [4])])


def test_a_sample_input_of_the_wrong_shape_names_the_expected_one() -> None:
    ens = linear()
    with pytest.raises(DeclarationError, match=re.escape(
            "input 'X' has shape [2, 3], expected [-1, 4] (-1: any size; the first dimension is the batch when "
            "the ensemble batches)")):
        ens.sample("bad", {"X": np.zeros((2, 3), np.float32)}, {"Y": np.zeros((2, 4), np.float32)})


def test_a_request_over_max_batch_size_is_refused_by_conch_run() -> None:
    ens = linear()
    with pytest.raises(DeclarationError, match=re.escape("batch of 5 exceeds the ensemble's max_batch_size 4")):
        conch.run(ens, {"X": np.zeros((5, 4), np.float32)})


@pytest.mark.parametrize("req", ["git+https://example.com/x.git", "-e .", "./wheels/x.whl"])
def test_python_env_refuses_requirements_that_are_not_named(req: str) -> None:
    with pytest.raises(DeclarationError, match=re.escape(
            f"PythonEnv requirement {req!r}: only named requirements (name[extras] specifier) are supported, so "
            "the environment resolves to wheels by name and version")):
        PythonEnv(requirements=(req,))


def test_python_env_refuses_a_malformed_requirement() -> None:
    with pytest.raises(DeclarationError, match=re.escape("PythonEnv requirement 'numpy>=>1' is not a valid "
                                                         "requirement: ")):
        PythonEnv(requirements=("numpy>=>1",))


def test_labels_must_be_one_per_class() -> None:
    with pytest.raises(DeclarationError, match=re.escape(
            "2 labels are given, but dims [3] make 3 classes; give one label per class")):
        Tensor("probs", "FP32", [3], labels=["cat", "dog"])


def test_a_label_file_with_the_wrong_line_count(tmp_path: Path) -> None:
    labels = tmp_path / "labels.txt"
    labels.write_text("cat\ndog\n")
    with pytest.raises(DeclarationError, match=re.escape(
            f"label file {labels} has 2 lines, but dims [3] make 3 classes; give one label per class")):
        Tensor("probs", "FP32", [3], labels=labels)


@pytest.mark.parametrize("name", ["/abs/x.bin", "../x.bin", ""])
def test_warmup_file_names_stay_inside_warmup(name: str, tmp_path: Path) -> None:
    with pytest.raises(DeclarationError, match=re.escape(
            f"warmup file name {name!r} must be a relative path in warmup/")):
        PythonStep("s", basic_steps.double, inputs=[Tensor("x", "FP32", [4])], outputs=[Tensor("y", "FP32", [4])],
                   max_batch_size=4, warmup_files={name: tmp_path / "x.bin"})


def test_a_warmup_file_that_does_not_exist_fails_the_build_check(tmp_path: Path) -> None:
    missing = tmp_path / "x.bin"
    ens = one_step(basic_steps.double, [Tensor("x", "FP32", [4])], [Tensor("y", "FP32", [4])],
                   warmup_files={"x.bin": missing})
    with pytest.raises(BuildError, match=re.escape(
            f"step 's': warmup file 'x.bin' points at {missing}, which does not exist")):
        conch.run(ens, {"X": np.zeros((1, 4), np.float32)})


def test_config_fields_text_that_is_not_a_model_config() -> None:
    with pytest.raises(DeclarationError, match=re.escape(
            "config_fields text does not parse as Triton's ModelConfig: ")):
        PythonStep("s", basic_steps.double, inputs=[Tensor("x", "FP32", [4])], outputs=[Tensor("y", "FP32", [4])],
                   max_batch_size=4, config_fields="model_transaction_policy { decoupled: maybe }")


# What the generated model.py says when the step's code returns the wrong thing (run in this process).


@pytest.mark.parametrize(("code", "inputs", "outputs", "message"), [
    pytest.param(basic_steps.double, [Tensor("x", "FP32", [4])], [Tensor("z", "FP32", [4])],
                 "step 's' of ensemble 'e' returned no value for output(s) ['z'] (it returned ['y'])",
                 id="outputs-the-code-did-not-return"),
    pytest.param(basic_steps.split_sum, [Tensor("a", "FP32", [4]), Tensor("b", "FP32", [4])],
                 [Tensor("y", "FP32", [4])],
                 "step 's' of ensemble 'e' must return a dict {output name: array}, or a tuple of 1 arrays in the "
                 "order ['y']; got tuple", id="a-tuple-of-the-wrong-length"),
    pytest.param(basic_steps.double, [Tensor("x", "FP32", [4])], [Tensor("y", "BYTES", [4])],
                 "step 's' of ensemble 'e': output 'y' must be BYTES (str/bytes), got dtype float32",
                 id="numbers-for-a-bytes-output"),
])
def test_model_py_refuses_what_the_code_returned(
    code: object, inputs: list[Tensor], outputs: list[Tensor], message: str
) -> None:
    ens = one_step(code, inputs, outputs)
    with pytest.raises(RunError, match=re.escape(message)):
        conch.run(ens, {t.name.upper(): np.ones((2, 4), np.float32) for t in inputs})


def test_model_py_names_the_file_a_class_step_misses() -> None:
    ens = one_step(basic_steps.Prefixer, [Tensor("TEXT", "BYTES", [1])], [Tensor("OUT", "BYTES", [1])])
    with pytest.raises(RunError, match=re.escape(
            "step 's': no file 'prefix.txt' among its files []; add it to the step's files=")):
        conch.run(ens, {"TEXT": np.array([[b"a"]], dtype=object)})
