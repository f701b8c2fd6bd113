"""One signature shape for the seven step classes: ``Step(name, source, *, inputs, outputs, max_batch_size, ...)``.
The old spellings (inputs and outputs positional, the source under its old keyword) still declare the same step
for one release, with a DeprecationWarning naming the new spelling."""

from __future__ import annotations

import inspect
import tarfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import basic_steps
import pytest

from conch import (
    DaliStep,
    DeclarationError,
    Ensemble,
    OnnxStep,
    PythonEnv,
    PythonModelStep,
    PythonStep,
    TensorFlowStep,
    TensorRTStep,
    TorchScriptStep,
)
from conch import Tensor as T
from conch.builder.repository_build import render_repository
from conch.ensembles.step import Step

INS, OUTS = [T("x", "UINT8", [4])], [T("y", "UINT8", [4])]


def _model_folder(root: Path) -> Path:
    (root / "1").mkdir(parents=True)
    (root / "1/model.py").write_text("class TritonPythonModel:\n    pass\n")
    return root


def _onnx_file() -> Path:
    return Path("never-read.onnx")


# each class: (how its source is made, the keyword the source had before)
SOURCES: dict[type[Step], tuple[Callable[[Path], Any], str]] = {
    PythonStep: (lambda tmp: basic_steps.double, "code"),
    PythonModelStep: (lambda tmp: _model_folder(tmp / "hand"), "folder"),
    DaliStep: (lambda tmp: b"serialized pipeline", "pipeline"),
    TorchScriptStep: (lambda tmp: lambda: b"torchscript", "model"),
    OnnxStep: (lambda tmp: _onnx_file, "model"),
    TensorFlowStep: (lambda tmp: lambda: b"graphdef", "graph"),
    TensorRTStep: (lambda tmp: _onnx_file, "onnx"),
}
ALL = pytest.mark.parametrize("cls", list(SOURCES), ids=[c.__name__ for c in SOURCES])


@ALL
def test_every_step_class_has_one_signature_shape(cls: type[Step]) -> None:
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]  # past self
    assert [p.name for p in params[:2]] == ["name", "source"]
    assert all(p.kind is p.POSITIONAL_OR_KEYWORD for p in params[:2])
    keywords = {p.name: p for p in params if p.kind is p.KEYWORD_ONLY}
    for name, default in (("inputs", None), ("outputs", None), ("max_batch_size", 0)):
        assert keywords[name].default == default, (cls.__name__, name)
    assert list(keywords)[:3] == ["inputs", "outputs", "max_batch_size"]


@ALL
def test_the_new_spelling_declares_without_a_warning(cls: type[Step], tmp_path: Path) -> None:
    source, _ = SOURCES[cls]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        step = cls("s", source(tmp_path), inputs=INS, outputs=OUTS, max_batch_size=4)
    assert (step.inputs, step.outputs, step.max_batch_size) == (tuple(INS), tuple(OUTS), 4)


@ALL
def test_the_old_spellings_still_declare_the_step_with_a_deprecation_warning(cls: type[Step], tmp_path: Path) -> None:
    source, old = SOURCES[cls]
    made = source(tmp_path)
    name = cls.__name__
    if cls in (PythonStep, PythonModelStep, DaliStep, TorchScriptStep):  # the four that took them positionally
        with pytest.warns(DeprecationWarning, match=rf"^{name}\(name, source, inputs, outputs\) is deprecated: pass "
                          rf"them by keyword, {name}\(name, source, inputs=\[\.\.\.\], outputs=\[\.\.\.\]\); the "
                          "positional form goes in the next release$"):
            step = cls("s", made, INS, OUTS, max_batch_size=4)  # type: ignore[misc]
        assert (step.inputs, step.outputs) == (tuple(INS), tuple(OUTS))
    with pytest.warns(DeprecationWarning, match=rf"^{name}\({old}=\.\.\.\) is deprecated: give the model source as "
                      rf"the second argument, {name}\(name, source, inputs=\.\.\., outputs=\.\.\.\); {old}= goes in "
                      "the next release$"):
        step = cls("s", inputs=INS, outputs=OUTS, max_batch_size=4, **{old: made})
    assert (step.inputs, step.outputs) == (tuple(INS), tuple(OUTS))


def test_a_source_given_twice_or_io_given_twice_is_refused(tmp_path: Path) -> None:
    with pytest.raises(DeclarationError, match=r"^OnnxStep: give the model source once, as the second argument "
                                               r"\(not also model=\)$"):
        OnnxStep("s", _onnx_file, model=_onnx_file, inputs=INS, outputs=OUTS)
    with pytest.raises(DeclarationError, match=r"^PythonStep\(name, source, \*, inputs=\.\.\., outputs=\.\.\.\): "
                                               r"inputs and outputs are keyword arguments; got 2 more positional "
                                               r"argument\(s\) after the source$"):
        PythonStep("s", basic_steps.double, INS, OUTS, inputs=INS)  # type: ignore[misc]


def test_a_step_without_its_source_says_where_it_goes() -> None:
    with pytest.raises(DeclarationError, match=r"^python step 's': give its code, a function or class, as the second "
                                               r"argument \(or a hand-written model folder, to PythonStep itself\)$"):
        PythonStep("s", inputs=INS, outputs=OUTS)


def test_a_step_that_cannot_read_its_io_asks_for_inputs_and_outputs() -> None:
    with pytest.raises(DeclarationError, match=r"^python step 's': its model file declares no I/O, so declare "
                                               r"inputs= and outputs="):
        PythonStep("s", basic_steps.double)


def test_dali_without_max_batch_size_says_it_needs_one() -> None:
    with pytest.raises(DeclarationError, match=r"^dali step 's': DALI's Triton backend needs max_batch_size >= 1 \(a "
                                               r"pipeline always runs on batches\), got 0$"):
        DaliStep("s", b"serialized", inputs=INS, outputs=OUTS)


def test_python_step_given_a_folder_is_a_python_model_step(tmp_path: Path) -> None:
    step = PythonStep("hand", _model_folder(tmp_path / "hand"), inputs=INS, outputs=OUTS, max_batch_size=4)
    assert isinstance(step, PythonModelStep) and step.folder == tmp_path / "hand"


def test_tensorrt_takes_a_prebuilt_plan_as_its_source() -> None:
    step = TensorRTStep("s", b"engine", inputs=INS, outputs=OUTS, max_batch_size=4)
    assert step.onnx is None and step.plan is not None
    plan = TensorRTStep("s", Path("model.plan"), inputs=INS, outputs=OUTS, max_batch_size=4)
    assert plan.onnx is None and plan.plan is not None
    with pytest.raises(DeclarationError, match=r"^tensorrt step 's': give the plan once, as the second argument or "
                                               r"as plan= beside an ONNX model$"):
        TensorRTStep("s", b"engine", plan=b"engine", inputs=INS, outputs=OUTS)


def test_a_python_model_step_takes_env_as_a_python_step_does(tmp_path: Path) -> None:
    env_root = tmp_path / "env"
    (env_root / "bin").mkdir(parents=True)
    (env_root / "bin/activate").write_text("")
    (env_root / "lib/python3.10/site-packages").mkdir(parents=True)
    packed = tmp_path / "env.tar.gz"
    with tarfile.open(packed, "w:gz") as tar:
        tar.add(env_root, arcname=".")
    step = PythonStep("hand", _model_folder(tmp_path / "hand"), inputs=[T("x", "FP32", [4])],
                      outputs=[T("y", "FP32", [4])], max_batch_size=4, env=PythonEnv(archive=packed))
    ens = Ensemble("with_env", max_batch_size=4, step_prefix="")
    ens.output("Y", step(ens.input("X", "FP32", [4])))
    files = render_repository(ens, "production", "24.10").files
    config = files["hand/config.pbtxt"]
    assert b"EXECUTION_ENV_PATH" in config  # type: ignore[operator]
    with pytest.raises(DeclarationError, match=r"^python_model step 'hand': env must be a conch.PythonEnv, got 'x'$"):
        PythonModelStep("hand", tmp_path / "hand", inputs=INS, outputs=OUTS, env="x")  # type: ignore[arg-type]


@pytest.mark.parametrize(("cls", "words"), [
    (PythonModelStep, r"python_model step 's': give its model folder \(the one holding 1/model.py\) as the second "
                      r"argument"),
    (DaliStep, r"dali step 's': give its pipeline \(a pipeline function, or a serialized pipeline: bytes or a .dali "
               r"file\) as the second argument"),
    (TorchScriptStep, r"pytorch step 's': give its TorchScript model \(a module, a .pt file or its bytes, or a "
                      r"function returning one\) as the second argument"),
    (OnnxStep, r"onnx step 's': give its model \(a .onnx file, or a function returning one\) as the second argument"),
    (TensorFlowStep, r"tensorflow step 's': give its graph \(a GraphDef, its bytes or file, a tf.Graph, or a "
                     r"function returning one\) as the second argument"),
], ids=lambda v: getattr(v, "__name__", ""))
def test_each_step_without_its_source_says_what_goes_second(cls: type[Step], words: str) -> None:
    with pytest.raises(DeclarationError, match=rf"^{words}$"):
        cls("s", inputs=INS, outputs=OUTS, max_batch_size=4)
