"""Models a build refuses: a DALI pipeline that fails when run once on a generated input, one whose
operator has no CPU version for the local stand-in, an autoserialized pipeline whose source file cannot be
found, and an ONNX model whose inputs the TensorRT step declares only in part (compiled with the stand-in
tensorrt module that follows TensorRT's documented Python API, as a GPU host would). Each error names the
step and the model's part at fault."""

from __future__ import annotations

import sys
from pathlib import Path

import dali_refused
import fake_tensorrt
import onnx
import pytest
from onnx import TensorProto, helper

from conch import BuildError, DaliStep, DeclarationError, Ensemble, Release, Tensor, TensorRTStep
from conch.builder.repository_build import render_repository

RELEASE = Release.of("24.10")


def reshape() -> DaliStep:
    return DaliStep("reshape", dali_refused.reshape_to_four, inputs=[Tensor("X", "FP32", [3])],
                    outputs=[Tensor("Y", "FP32", [2, 2])],
                    max_batch_size=4)


def flow() -> DaliStep:
    return DaliStep("flow", dali_refused.optical_flow, inputs=[Tensor("FRAMES", "UINT8", [2, 64, 64, 3])],
                    outputs=[Tensor("FLOW", "FP32", [-1, -1, -1, 2])], max_batch_size=4)


def test_a_pipeline_that_fails_on_a_generated_input_is_refused_with_how_to_proceed() -> None:
    with pytest.raises(BuildError, match=r"dali step 'reshape': running the pipeline once on the CPU on a generated "
                                         r"input failed: .*; check the inputs' dtypes and dims \(or pass probe=False"):
        reshape().check(RELEASE)


def test_a_pipeline_with_a_gpu_only_operator_has_no_local_standin() -> None:
    with pytest.raises(BuildError, match=r"dali step 'flow': the pipeline cannot run on the CPU for the local "
                                         r"stand-in: .*; use operators that have a CPU version, or replay it on a GPU"):
        flow().check(RELEASE)


@pytest.mark.parametrize(("make", "cause"), [(reshape, "Input and output samples must occupy the same size"),
                                             (flow, 'Operator "OpticalFlow" not registered for cpu')],
                         ids=["run", "cpu"])
def test_a_refused_pipeline_says_which_operator_failed_and_why(make, cause: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(BuildError) as caught:
        make().check(RELEASE)
    message = str(caught.value)
    assert cause in message
    assert "Critical error" not in message and "C++ context" not in message


def test_an_autoserialized_pipeline_typed_into_a_repl_has_no_source_file_to_ship() -> None:
    namespace: dict[str, object] = {"__name__": "__main__"}
    exec(compile("def pipeline():\n    pass\n", "<stdin>", "exec"), namespace)
    with pytest.raises(DeclarationError, match=r"dali step 'x': cannot find the source file of pipeline "
                                               r"\(defined in an interactive session or a notebook cell\?\); "
                                               r"define the pipeline function in a \.py module"):
        DaliStep("x", namespace["pipeline"], inputs=[Tensor("A", "FP32", [4])], outputs=[Tensor("Y", "FP32", [4])],
                 max_batch_size=4, autoserialize=True)


def test_an_onnx_input_the_tensorrt_step_does_not_declare_is_named_when_compiling(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONCH_CACHE_DIR", str(tmp_path / "cache"))  # compiled plans are cached
    monkeypatch.setitem(sys.modules, "tensorrt", fake_tensorrt.module("10.5.0"))
    a, b, y = (helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", 4]) for n in ("a", "b", "y"))
    graph = helper.make_graph([helper.make_node("Add", ["a", "b"], ["y"])], "add", [a, b], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "add.onnx")
    step = TensorRTStep("add", tmp_path / "add.onnx", inputs=[Tensor("a", "FP32", [4])],
                        outputs=[Tensor("y", "FP32", [4])], max_batch_size=8)
    ens = Ensemble("trt_add", max_batch_size=8)
    ens.output("Y", step(ens.input("X", "FP32", [4])))
    with pytest.raises(BuildError, match=r"ensemble 'trt_add': tensorrt step 'add': model.onnx has input 'b', which "
                                         r"the step does not declare; declare every input of the ONNX model"):
        render_repository(ens, "production", "24.10")
