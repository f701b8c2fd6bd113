"""The local stand-ins' runners, run here the way the generated model.py runs them inside Triton
(``setup(context)`` once, then ``__call__(**inputs)`` per batch), against what the model computes when
run directly with its own library. Replays through the real server prove the same runners end to end;
running them in this process also lets coverage see them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx_models
import onnxruntime
import pytest
import tf_graphs
import torch
import torch_modules

from conch import OnnxStep, Tensor, TensorFlowStep, TorchScriptStep
from conch.backends.standins.onnxruntime_runner import OnnxRuntimeRunner
from conch.backends.standins.tensorflow_runner import GraphDefRunner
from conch.backends.standins.torchscript_runner import TorchScriptRunner
from conch.ensembles.step import Step


class Context:
    """What model.py hands a step's setup(): ``file(name)`` finds the step's files."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def file(self, name: str) -> str:
        return str(self.folder / name)


def lay_out(step: Step, folder: Path) -> Context:
    """The stand-in's files, as the build puts them in the model folder's files/."""
    for name, source in step.standin().files.items():  # type: ignore[attr-defined]
        (folder / name).parent.mkdir(parents=True, exist_ok=True)  # the runner's own file is in standin/
        (folder / name).write_bytes(source if isinstance(source, bytes) else Path(source).read_bytes())
    return Context(folder)


X = np.arange(8, dtype=np.float32).reshape(2, 4)


def test_onnx_runtime_runner_answers_as_onnx_runtime(tmp_path: Path) -> None:
    model = onnx_models.affine(tmp_path / "a.onnx")
    runner = OnnxRuntimeRunner()
    runner.setup(lay_out(OnnxStep("affine", model, max_batch_size=8), tmp_path))
    (direct,) = onnxruntime.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, {"x": X})
    np.testing.assert_array_equal(runner(x=X)["y"], direct)


def test_torchscript_runner_binds_by_forward_argument_name(tmp_path: Path) -> None:
    step = TorchScriptStep("difference", torch_modules.difference(),
                           inputs=[Tensor("b", "FP32", [4]), Tensor("a", "FP32", [4])],
                           outputs=[Tensor("OUTPUT__0", "FP32", [4]), Tensor("OUTPUT__1", "FP32", [4])],
                           max_batch_size=4)
    runner = TorchScriptRunner()
    runner.setup(lay_out(step, tmp_path))
    a, b = X, X[::-1].copy()
    out = runner(b=b, a=a)
    np.testing.assert_array_equal(out["OUTPUT__0"], a - b)
    np.testing.assert_array_equal(out["OUTPUT__1"], a + b)
    read_only = a.copy()
    read_only.flags.writeable = False  # Triton's input buffers may be read-only: the runner copies them
    np.testing.assert_array_equal(runner(b=b, a=read_only)["OUTPUT__0"], a - b)


class _Dict(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"y": x}


def test_torchscript_runner_refuses_results_libtorch_cannot_return(tmp_path: Path) -> None:
    torch.jit.save(torch.jit.script(_Dict()), str(tmp_path / "model.pt"))
    (tmp_path / "standin.json").write_text('{"inputs": ["x"], "outputs": [["OUTPUT__0", 0]]}')
    runner = TorchScriptRunner()
    runner.setup(Context(tmp_path))
    with pytest.raises(TypeError, match=r"forward\(\) returned dict; the libtorch backend needs a tensor or a tuple"):
        runner(x=X)
    (tmp_path / "standin.json").write_text('{"inputs": ["x"], "outputs": [["OUTPUT__1", 1]]}')
    torch.jit.save(torch_modules.affine(), str(tmp_path / "model.pt"))
    runner.setup(Context(tmp_path))
    with pytest.raises(ValueError, match=r"output 'OUTPUT__1' is element 1 of forward\(\)'s result, which has 1"):
        runner(x=X)


def test_graphdef_runner_answers_as_a_tensorflow_session(tmp_path: Path) -> None:
    tf = tf_graphs.tensorflow()  # imported by the worker that runs this test only
    step = TensorFlowStep("affine", tf_graphs.affine(), max_batch_size=8)
    runner = GraphDefRunner()
    runner.setup(lay_out(step, tmp_path))
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.import_graph_def(tf.compat.v1.GraphDef.FromString(tf_graphs.affine()), name="")
    with tf.compat.v1.Session(graph=graph) as session:
        direct = session.run("affine/y:0", {"inputs/x:0": X})
    np.testing.assert_array_equal(runner(**{"inputs/x": X})["affine/y"], direct)
    runner.teardown()
