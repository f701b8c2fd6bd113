"""Every declaration check: each bad declaration fails where it is written, with a message naming it."""

from __future__ import annotations

import re
from pathlib import Path

import basic_steps
import numpy as np
import pytest

from conch import (
    BuildError,
    DeclarationError,
    DynamicBatching,
    Ensemble,
    InstanceGroup,
    PythonEnv,
    PythonStep,
    Release,
    Tensor,
    Warmup,
)
from conch.ensembles.config import VersionPolicy
from conch.ensembles.dtypes import DType
from conch.ensembles.target import Target


def step(name: str = "s", inputs=None, outputs=None, code=basic_steps.double, **kw) -> PythonStep:  # type: ignore[no-untyped-def]
    kw.setdefault("max_batch_size", 8)
    return PythonStep(name, code, inputs=inputs or [Tensor("x", "FP32", [4])],
                      outputs=outputs or [Tensor("y", "FP32", [4])], **kw)


def ensemble(name: str = "e", mbs: int = 8) -> Ensemble:
    return Ensemble(name, max_batch_size=mbs)


def test_unknown_dtype_lists_the_valid_ones() -> None:
    with pytest.raises(DeclarationError, match=r"unknown dtype 'FLOAT33'.*FP32"):
        Tensor("x", "FLOAT33", [1])


@pytest.mark.parametrize("char", list(";|&$`<>()[]{}\"'*?~#!"))
def test_model_names_refuse_shell_and_triton_specials(char: str) -> None:
    with pytest.raises(DeclarationError, match="may not contain"):
        Ensemble(f"bad{char}name")


@pytest.mark.parametrize(("name", "message"), [
    ("", "python step: a model name must be a non-empty string, got ''"),
    ("has space", "python step: name 'has space' is not a safe folder name"),
    ("a/b", "python step: name 'a/b' is not a safe folder name"),
    (".hidden", "python step: name '.hidden' is not a safe folder name"),
    ("123", "python step: name '123' is all digits, which Triton reads as a version folder"),
])
def test_model_names_refuse_non_folder_names(name: str, message: str) -> None:
    with pytest.raises(DeclarationError, match=re.escape(message)):
        step(name=name)


def test_tensor_names_refuse_specials_and_whitespace() -> None:
    with pytest.raises(DeclarationError, match="tensor name 'a b'"):
        Tensor("a b", "FP32", [1])
    with pytest.raises(DeclarationError, match="tensor name"):
        Tensor('a"b', "FP32", [1])


@pytest.mark.parametrize("dims", [[0], [-2], [3, 0]])
def test_dims_must_be_positive_or_wildcard(dims: list[int]) -> None:
    with pytest.raises(DeclarationError, match="positive sizes or -1"):
        Tensor("x", "FP32", dims)


def test_wrong_dtype_fails_at_the_call_naming_ensemble_step_and_tensor() -> None:
    ens = ensemble()
    x = ens.input("X", "INT32", [4])
    message = r"ensemble 'e', step 's', input 'x': expects FP32 but ensemble input 'X' is INT32"
    with pytest.raises(DeclarationError, match=message):
        step()(x)


def test_wrong_dims_fail_at_the_call() -> None:
    ens = ensemble()
    x = ens.input("X", "FP32", [5])
    with pytest.raises(DeclarationError, match=r"expects dims \[4\] but ensemble input 'X' has dims \[5\]"):
        step()(x)


def test_wildcard_dims_match_any_size() -> None:
    ens = ensemble()
    x = ens.input("X", "FP32", [-1])
    y = step()(x)
    assert y.dims == (4,)


def test_rank_mismatch_fails_even_with_wildcards() -> None:
    ens = ensemble()
    x = ens.input("X", "FP32", [-1, -1])
    with pytest.raises(DeclarationError, match="expects dims"):
        step()(x)


def test_unknown_input_name() -> None:
    ens = ensemble()
    x = ens.input("X", "FP32", [4])
    with pytest.raises(DeclarationError, match=r"step 's' has no input 'nope'; its inputs are 'x'"):
        step()(nope=x)


def test_missing_required_input() -> None:
    ens = ensemble()
    a = ens.input("A", "FP32", [4])
    s = step(inputs=[Tensor("a", "FP32", [4]), Tensor("b", "FP32", [4])], code=basic_steps.split_sum,
             outputs=[Tensor("sum", "FP32", [4]), Tensor("diff", "FP32", [4])])
    with pytest.raises(DeclarationError, match=r"required input 'b' is not connected"):
        s(a=a)


def test_too_many_positional_handles() -> None:
    ens = ensemble()
    x = ens.input("X", "FP32", [4])
    with pytest.raises(DeclarationError, match="takes 1 inputs"):
        step()(x, x)


def test_input_given_twice() -> None:
    ens = ensemble()
    x = ens.input("X", "FP32", [4])
    with pytest.raises(DeclarationError, match="both by position and by name"):
        step()(x, x=x)


def test_handles_from_two_ensembles_do_not_mix() -> None:
    one, two = ensemble("one"), ensemble("two")
    a = one.input("A", "FP32", [4])
    b = two.input("B", "FP32", [4])
    s = step(inputs=[Tensor("a", "FP32", [4]), Tensor("b", "FP32", [4])], code=basic_steps.split_sum,
             outputs=[Tensor("sum", "FP32", [4]), Tensor("diff", "FP32", [4])])
    with pytest.raises(DeclarationError, match="belongs to ensemble 'two'"):
        s(a, b)


def test_inputs_must_be_handles() -> None:
    with pytest.raises(DeclarationError, match="must be tensor handles"):
        step()(np.zeros(4))  # type: ignore[arg-type]


def test_a_step_runs_once_per_ensemble() -> None:
    ens = ensemble()
    s = step()
    s(ens.input("X", "FP32", [4]))
    with pytest.raises(DeclarationError, match="a step named 's' is already in this ensemble"):
        s(ens.input("X2", "FP32", [4]))


def test_one_step_may_serve_two_ensembles() -> None:
    s = step()
    for name in ("one", "two"):
        ens = ensemble(name)
        ens.output("Y", s(ens.input("X", "FP32", [4])))
        ens.validate()
        assert ens.model_name(s) == f"{name}__s"  # each ensemble gets a step model of its own


def test_single_output_handle_cannot_be_unpacked() -> None:
    ens = ensemble()
    y = step()(ens.input("X", "FP32", [4]))
    with pytest.raises(DeclarationError, match="single tensor handle"):
        _a, _b = y


def test_duplicate_ensemble_tensor_names() -> None:
    ens = ensemble()
    ens.input("X", "FP32", [4])
    with pytest.raises(DeclarationError, match="tensor 'X' is already declared"):
        ens.input("X", "FP32", [4])


def test_ensemble_input_cannot_be_an_output() -> None:
    ens = ensemble()
    x = ens.input("X", "FP32", [4])
    with pytest.raises(DeclarationError, match="can only output tensors that a step produces"):
        ens.output("Y", x)


def test_output_dtype_and_dims_checks() -> None:
    ens = ensemble()
    y = step()(ens.input("X", "FP32", [4]))
    with pytest.raises(DeclarationError, match=r"declared INT64 but output 'y' of step 's' is FP32"):
        ens.output("Y", y, dtype="INT64")
    with pytest.raises(DeclarationError, match=r"declared dims \[3\]"):
        ens.output("Y", y, dims=[3])


def test_a_tensor_is_written_once() -> None:
    ens = ensemble()
    y = step()(ens.input("X", "FP32", [4]))
    ens.output("Y", y)
    with pytest.raises(DeclarationError, match="already ensemble output 'Y'"):
        ens.output("Y2", y)


def test_unused_ensemble_input() -> None:
    ens = ensemble()
    ens.output("Y", step()(ens.input("X", "FP32", [4])))
    ens.input("UNUSED", "FP32", [4])
    with pytest.raises(DeclarationError, match="input 'UNUSED' is not used by any step"):
        ens.validate()


def test_unused_step_output_and_discard() -> None:
    ens = ensemble()
    a = ens.input("A", "FP32", [4])
    b = ens.input("B", "FP32", [4])
    s = step(inputs=[Tensor("a", "FP32", [4]), Tensor("b", "FP32", [4])], code=basic_steps.split_sum,
             outputs=[Tensor("sum", "FP32", [4]), Tensor("diff", "FP32", [4])])
    total, diff = s(a, b)
    ens.output("SUM", total)
    with pytest.raises(DeclarationError, match="output 'diff' of step 's' is never used"):
        ens.validate()
    ens.discard(diff)
    ens.validate()
    assert [m for m in ens.spec().ensemble_steps[0].output_map] == [("sum", "SUM")]


def test_no_steps_and_no_outputs() -> None:
    ens = ensemble()
    with pytest.raises(DeclarationError, match="has no steps"):
        ens.validate()
    step()(ens.input("X", "FP32", [4]))
    with pytest.raises(DeclarationError, match="declares no outputs"):
        ens.validate()


def test_ensemble_batch_must_fit_every_step() -> None:
    ens = ensemble(mbs=16)
    ens.output("Y", step(max_batch_size=8)(ens.input("X", "FP32", [4])))
    with pytest.raises(DeclarationError, match=r"max_batch_size 16 exceeds step 's''s max_batch_size 8"):
        ens.validate()


def test_non_batching_step_in_batching_ensemble_takes_the_batch_as_its_first_dim() -> None:
    """Triton loads a step with max_batch_size 0 inside an ensemble with max_batch_size 4 when the step's dims are
    the ensemble's with the batch in front (tests/archive/load_rule_cases.py,
    non_batching_step_in_batching_ensemble, confirmed on tritonserver 2.51)."""
    ens = ensemble(mbs=4)
    with pytest.raises(DeclarationError, match=r"the step does not batch \(max_batch_size 0\) inside an ensemble that "
                       r"does, so it gets the whole batch: declare its dims with the batch first, e.g. \[-1, 4\]"):
        step(max_batch_size=0)(ens.input("X", "FP32", [4]))
    ens = ensemble(mbs=4)
    whole = step(max_batch_size=0, inputs=[Tensor("x", "FP32", [-1, 4])], outputs=[Tensor("y", "FP32", [-1, 4])])
    y = whole(ens.input("X", "FP32", [4]))
    assert y.dims == (4,)
    ens.output("Y", y)
    ens.validate()


def test_non_batching_ensemble_sees_batching_steps_with_batch_dim() -> None:
    ens = ensemble(mbs=0)
    y = step(max_batch_size=8)(ens.input("X", "FP32", [-1, 4]))
    assert y.dims == (-1, 4)


@pytest.mark.parametrize("field", ["instance_group", "dynamic_batching", "model_warmup"])
def test_ensemble_refuses_per_model_scheduling_fields(field: str) -> None:
    with pytest.raises(DeclarationError, match=f"{field} cannot be set on an ensemble"):
        Ensemble("e", **{field: object()})


def test_dynamic_batching_needs_batching() -> None:
    with pytest.raises(DeclarationError, match="dynamic_batching needs max_batch_size > 0"):
        step(max_batch_size=0, dynamic_batching=DynamicBatching())


def test_warmup_batch_bounded_by_max_batch_size() -> None:
    with pytest.raises(DeclarationError, match="exceeds max_batch_size"):
        step(max_batch_size=4, warmup=Warmup("w", batch_size=8))


def test_instance_group_kind_checked() -> None:
    with pytest.raises(DeclarationError, match="instance_group kind 'TPU'"):
        InstanceGroup("TPU")
    assert InstanceGroup("gpu").kind == "KIND_GPU"


def test_negative_max_batch_size() -> None:
    with pytest.raises(DeclarationError, match="max_batch_size -1"):
        step(max_batch_size=-1)


def test_tensor_name_collision_between_input_and_internal_name() -> None:
    ens = ensemble()
    y = step()(ens.input("X", "FP32", [4]))
    z = step("t", inputs=[Tensor("y", "FP32", [4])], outputs=[Tensor("z", "FP32", [4])])(y)
    ens.output("Z", z)
    ens.input("s.y", "FP32", [4])  # the internal name of s's output
    with pytest.raises(DeclarationError, match="tensor name 's.y' is used by both"):
        ens.validate()


def test_duplicate_step_tensor_names() -> None:
    with pytest.raises(DeclarationError, match="input 'x' is declared twice"):
        step(inputs=[Tensor("x", "FP32", [4]), Tensor("x", "FP32", [4])])


class TestSamples:
    def test_unknown_input(self) -> None:
        ens = ensemble()
        ens.input("X", "FP32", [4])
        with pytest.raises(DeclarationError, match="no ensemble input 'Y'"):
            ens.sample("s", {"Y": np.zeros((1, 4))}, {})

    def test_wrong_shape(self) -> None:
        ens = ensemble()
        ens.input("X", "FP32", [4])
        with pytest.raises(DeclarationError, match=r"input 'X' has shape \[1, 3\], expected \[-1, 4\]"):
            ens.sample("s", {"X": np.zeros((1, 3))}, {})

    def test_batch_too_large(self) -> None:
        ens = ensemble(mbs=2)
        ens.input("X", "FP32", [4])
        with pytest.raises(DeclarationError, match="batch of 3 exceeds"):
            ens.sample("s", {"X": np.zeros((3, 4))}, {})

    def test_missing_input(self) -> None:
        ens = ensemble()
        ens.input("X", "FP32", [4])
        with pytest.raises(DeclarationError, match="no value for required input"):
            ens.sample("s", {}, {})


class TestPythonStepCode:
    def test_nested_function_refused(self) -> None:
        def inner(x):  # type: ignore[no-untyped-def]
            return x

        with pytest.raises(DeclarationError, match="top level of a module"):
            step(code=inner)

    def test_lambda_refused(self) -> None:
        with pytest.raises(DeclarationError, match="top level of a module"):
            step(code=lambda x: x)

    def test_module_importing_conch_refused(self) -> None:
        import conch_importing_steps

        with pytest.raises(DeclarationError, match="imports conch.*move step to a module of its own"):
            step(code=conch_importing_steps.step)

    def test_input_names_must_be_identifiers(self) -> None:
        with pytest.raises(DeclarationError, match="must be a Python identifier"):
            step(inputs=[Tensor("input.1", "FP32", [4])])

    def test_file_names_must_be_relative(self) -> None:
        with pytest.raises(DeclarationError, match="must be a relative path"):
            step(files={"../x": b""})


def test_label_file_name_of_a_tensor_name_with_slashes_stays_one_file() -> None:
    t = Tensor("InceptionV3/Predictions/Softmax", "FP32", [3], labels=["a", "b", "c"])
    assert t.label_filename == "InceptionV3_Predictions_Softmax_labels.txt"


def test_unknown_step_setting_is_named() -> None:
    with pytest.raises(DeclarationError, match=r"python step 's': unknown setting\(s\) instance_groups; settings are"):
        step(instance_groups=[InstanceGroup("KIND_CPU")])


def _wired() -> tuple[Ensemble, object]:
    ens = ensemble()
    return ens, step()(ens.input("X", "FP32", [4]))


def _output_of_another_ensemble() -> None:
    _, foreign = _wired()
    ensemble("other").output("Y", foreign)  # type: ignore[arg-type]


def _output_twice() -> None:
    ens, y = _wired()
    ens.output("Y", y)  # type: ignore[arg-type]
    ens.output("Y", y)  # type: ignore[arg-type]


def _sample_twice() -> None:
    ens, y = _wired()
    ens.output("Y", y)  # type: ignore[arg-type]
    ens.sample("s", {"X": np.zeros((1, 4), np.float32)}, {"Y": np.zeros((1, 4), np.float32)})
    ens.sample("s", {"X": np.zeros((1, 4), np.float32)}, {"Y": np.zeros((1, 4), np.float32)})


def _step_named_like_its_ensemble() -> None:
    ens = Ensemble("a__s", max_batch_size=8, step_prefix="a")  # step 's' would be model 'a__s' too
    ens.output("Y", step("s")(ens.input("X", "FP32", [4])))
    ens.validate()


def _no_handles() -> None:
    step(inputs=[Tensor("x", "FP32", [4], optional=True)])()


def _outputs_by_unknown_name() -> None:
    ens = ensemble()
    two = step(outputs=[Tensor("a", "FP32", [4]), Tensor("b", "FP32", [4])], code=basic_steps.Prefixer)
    two(ens.input("X", "FP32", [4]))["c"]


def _unpack_one_handle() -> None:
    _, y = _wired()
    _a, _b = y  # type: ignore[misc]


REFUSED = [  # (what a user writes, the error, its message)
    (lambda: InstanceGroup("KIND_CPU", count=0), DeclarationError, r"instance_group count 0: must be at least 1"),
    (lambda: InstanceGroup("KIND_CPU", gpus=(0,)), DeclarationError,
     r"gpus \[0\] only apply to KIND_GPU, not KIND_CPU"),
    (lambda: DynamicBatching((0, 4)), DeclarationError, r"dynamic_batching preferred sizes \(0, 4\) must be >= 1"),
    (lambda: DynamicBatching((4,), -1), DeclarationError, r"max_queue_delay_microseconds must be >= 0"),
    (lambda: Warmup("w", batch_size=0), DeclarationError, r"model_warmup 'w': batch_size and count must be >= 1"),
    (lambda: VersionPolicy(), DeclarationError, r"version_policy: give exactly one of latest=N, all=True"),
    (lambda: VersionPolicy(latest=0), DeclarationError, r"version_policy latest must be >= 1"),
    (lambda: step(max_batch_size=0, warmup=Warmup("w", batch_size=4)), DeclarationError,
     r"python step 's': warmup 'w' batch_size must be 1 without batching"),
    (lambda: Ensemble("e", instance_groups=[]), DeclarationError, r"Ensemble\(\) got an unexpected keyword argument"),
    (lambda: Ensemble("e", max_batch_size=-1), DeclarationError, r"ensemble 'e': max_batch_size must be >= 0, got -1"),
    (lambda: Ensemble("e", env="tokenizers"), DeclarationError, r"ensemble 'e': env must be a conch.PythonEnv"),
    (lambda: step(env="tokenizers"), DeclarationError, r"python step 's': env must be a conch.PythonEnv"),
    (lambda: ensemble().output("Y", "x"), DeclarationError,  # type: ignore[arg-type]
     r"ensemble 'e' output 'Y': pass the tensor handle a step returned, got str"),
    (_output_of_another_ensemble, DeclarationError, r"output 'y' of step 's' belongs to ensemble 'e'"),
    (_output_twice, DeclarationError, r"ensemble 'e' output 'Y': tensor 'Y' is already declared"),
    (lambda: ensemble().discard(ensemble().input("X", "FP32", [4])), DeclarationError,
     r"ensemble 'e': only step outputs can be discarded"),
    (_sample_twice, DeclarationError, r"ensemble 'e' sample 's': a sample of that name exists already"),
    (_step_named_like_its_ensemble, DeclarationError, r"a step's model name equals the ensemble's; change step_prefix"),
    (lambda: ensemble().input("", "FP32", [4]), DeclarationError, r"a tensor name must be a non-empty string"),
    (lambda: PythonStep("s", basic_steps.double, inputs=[Tensor("x", "FP32", [4])], outputs=[]), DeclarationError,
     r"step 's': declare at least one output"),
    (lambda: step(inputs=["x"]), DeclarationError, r"step 's': inputs must be conch.Tensor, got 'x'"),
    (lambda: step(inputs=[Tensor("x", "FP32", [2], labels=["a", "b"])]), DeclarationError,
     r"step 's': labels belong on outputs, not input 'x'"),
    (_no_handles, DeclarationError, r"step 's': call it with at least one tensor handle"),
    (_outputs_by_unknown_name, KeyError, r"no output 'c'; this step has 'a', 'b'"),
    (_unpack_one_handle, DeclarationError, r"output 'y' of step 's' is a single tensor handle; .* do not unpack it"),
    (lambda: PythonEnv(requirements=("a",), name="my env"), DeclarationError,
     r"PythonEnv name 'my env': use letters, digits, '_' and '-'"),
    (lambda: PythonEnv(archive="env.zip"), DeclarationError,
     r"PythonEnv archive env.zip: use a .tar.gz, .tgz or .tar file, or an unpacked folder"),
    (lambda: Target.of("staging"), BuildError, r"unknown target 'staging': use 'production' or 'local'"),
    (lambda: Release.of("22.12"), BuildError, r"release 22.12: conch targets 23.02 and later"),
    (lambda: PythonStep("s", 42, inputs=[Tensor("x", "FP32", [4])], outputs=[Tensor("y", "FP32", [4])]),  # type: ignore[arg-type]
     DeclarationError, r"python step 's': code must be a function or a class, got 42"),
]


@pytest.mark.parametrize(("declare", "error", "message"), REFUSED, ids=[m[:40] for _, _, m in REFUSED])
def test_each_refusal_names_what_is_wrong(declare, error: type[Exception], message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(error, match=message):
        declare()


def test_a_requirements_file_including_itself_is_refused(tmp_path: Path) -> None:
    (tmp_path / "requirements.txt").write_text("tabulate\n-r requirements.txt\n")
    with pytest.raises(DeclarationError, match=r"requirements file .*requirements.txt includes itself"):
        PythonEnv.from_requirements_file(tmp_path / "requirements.txt")


def _function_in(path: Path, source: str) -> object:
    """``f`` as defined by the file ``path`` (whose whole text is ``source``), without running its imports."""
    path.write_text(source)
    namespace: dict[str, object] = {"__name__": path.stem}
    exec(compile("def f(x):\n    return {'y': x}\n", str(path), "exec"), namespace)
    return namespace["f"]


@pytest.mark.parametrize(("file", "source", "message"), [
    ("model.py", "def f(x):\n    return {'y': x}\n", r"its code lives in model.py, a name the Python backend reserves"),
    ("rel_steps.py", "from . import helpers\n\n\ndef f(x):\n    return {'y': x}\n",
     r"rel_steps.py uses a relative import; step modules are copied alone into the model folder"),
])
def test_step_modules_triton_cannot_import_are_refused(tmp_path: Path, file: str, source: str, message: str) -> None:
    with pytest.raises(DeclarationError, match=rf"python step 's': {message}"):
        step(code=_function_in(tmp_path / file, source))


def test_code_without_a_source_file_is_refused() -> None:
    with pytest.raises(DeclarationError, match=r"python step 's': cannot find the source file of len"):
        step(code=len)


def test_an_optional_ensemble_input_wired_into_a_required_step_input_is_refused() -> None:
    """A request that leaves the optional input out could never run the step: refused at declaration, with
    both fixes; an optional step input may take it."""
    ens = ensemble()
    ens.output("Y", step()(ens.input("X", "FP32", [4], optional=True)))  # type: ignore[arg-type]
    with pytest.raises(DeclarationError, match=r"ensemble 'e': input 'X' is optional, but step 's' requires it as "
                                               r"'x': a request without it fails in Triton .*declare the step's "
                                               r"input 'x' optional=True, or the ensemble's input required"):
        ens.validate()
    fine = ensemble()
    fine.output("Y", step(inputs=[Tensor("x", "FP32", [4], optional=True)])(  # type: ignore[arg-type]
        fine.input("X", "FP32", [4], optional=True)))
    fine.validate()


def test_code_is_looked_at_again_after_its_file_changes(tmp_path: Path) -> None:
    """After its file changes (here: it now imports conch), the next step of the same function is refused."""
    code = _function_in(tmp_path / "once_steps.py", "def f(x):\n    return {'y': x}\n")
    for name in ("a", "b", "c"):
        step(name=name, code=code)
    (tmp_path / "once_steps.py").write_text("import conch\n\n\ndef f(x):\n    return {'y': x}\n")
    with pytest.raises(DeclarationError, match=r"python step 'd': once_steps.py imports conch, but step code runs "
                                               r"inside Triton"):
        step(name="d", code=code)


@pytest.mark.parametrize("dtype", list(DType))
def test_a_dtypes_numpy_name_is_its_numpy_dtype_as_text(dtype: DType) -> None:
    assert dtype.numpy_name == str(dtype.numpy)
