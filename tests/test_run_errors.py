"""`conch.run` runs each step through its local Python-backend model; a step of a backend added without a
CPU stand-in (its local layout is its own backend's model) cannot run in the process, and the error names
the ensemble, the step and its backend."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import conch
from conch import Ensemble, PythonModelStep, RunError, Tensor
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


HAND_WRITTEN = '''import triton_python_backend_utils as pb_utils


class TritonPythonModel:
{body}
'''


@pytest.mark.parametrize(("body", "message"), [
    ("    pass", r"handmade__model: its TritonPythonModel has no execute\(self, requests\), which Triton calls for "
               r"every batch of requests; define it"),
    ("    def execute(self, requests):\n        return []",
     r"ensemble 'handmade', step 'model' \(python_model\): execute\(\) must return a list of one "
     r"pb_utils.InferenceResponse per request; for one request it returned list of 0"),
    ("    def execute(self, requests):\n        return [None]",
     r"step 'model' \(python_model\): execute\(\) returned NoneType for a request; answer each request with a "
     r"pb_utils.InferenceResponse"),
    ("    def execute(self, requests):\n        return [pb_utils.InferenceResponse([pb_utils.Tensor('Z', "
     "pb_utils.get_input_tensor_by_name(requests[0], 'x').as_numpy())])]",
     r"step 'model' \(python_model\): its response has no output 'y' \(it has \['Z'\]\); return one "
     r"pb_utils.Tensor per declared output"),
    ("    def execute(self, requests):\n"
     "        return [pb_utils.InferenceResponse(error=pb_utils.TritonError('bad x'))]",
     r"ensemble 'handmade', step 'model' \(python_model\) answered with an error: bad x$"),
    ("    def execute(self, requests):\n        raise ValueError('no model here')",
     r"ensemble 'handmade', step 'model' \(python_model\) raised ValueError: no model here"),
    ("    @staticmethod\n    def auto_complete_config(config):\n        return config.as_dict()\n"
     "    def execute(self, requests):\n        return []",
     r"handmade__model: auto_complete_config must return the pb_utils.ModelConfig it was given \(Triton refuses "
     r"the model\), got dict"),
])
@pytest.mark.parametrize("child", [False, True], ids=["in process", "on the image's Python"])
def test_a_hand_written_model_breaking_tritons_contract_is_named(body: str, message: str, child: bool,
                                                                tmp_path: Path) -> None:
    """The same words whether the model runs in conch's process (`conch run`) or in a child process on the
    release's image Python (the build's observe runs)."""
    ens = handmade(body, tmp_path)
    with pytest.raises(RunError, match=message), executor(ens, child) as running:
        running.run({"X": np.ones(4, np.float32)})


def handmade(body: str, folder: Path) -> Ensemble:
    (folder / "model" / "1").mkdir(parents=True)
    (folder / "model" / "1" / "model.py").write_text(HAND_WRITTEN.format(body=body))
    step = PythonModelStep("model", folder / "model", inputs=[Tensor("x", "FP32", [4])],
                           outputs=[Tensor("y", "FP32", [4])])
    ens = Ensemble("handmade")
    ens.output("Y", step(ens.input("X", "FP32", [4])))
    return ens


def executor(ens: Ensemble, child: bool) -> conch.Executor:
    """An executor of ``ens`` (24.10) whose Python steps run in this process, or in children on Python 3.10."""
    from conch.builder.observe import image_python
    from conch.compiler.compiled import compile_ensemble

    plan = compile_ensemble(ens, "local", "24.10")
    return conch.Executor(plan, python=image_python(plan)[0] if child else None)


def test_a_child_that_dies_in_a_call_is_named(tmp_path: Path) -> None:
    ens = handmade("    def execute(self, requests):\n        import os\n        os._exit(3)", tmp_path)
    with pytest.raises(RunError, match=r"ensemble 'handmade', step 'model' \(python_model\): its process on Python "
                       r"3.10 exited \(see the output above\)"), executor(ens, True) as running:
        running.run({"X": np.ones(4, np.float32)})


def test_a_child_that_dies_at_load_is_named(tmp_path: Path) -> None:
    ens = handmade("    import os\n    os._exit(3)", tmp_path)
    with pytest.raises(RunError, match=r"ensemble 'handmade', step 'model' \(python_model\): its process on Python "
                       r"3.10 exited while loading it \(see the output above\)"), executor(ens, True) as running:
        running.run({"X": np.ones(4, np.float32)})


def test_a_child_never_called_ends_with_the_run(tmp_path: Path) -> None:
    running = executor(handmade("    def execute(self, requests):\n        return []", tmp_path), True)
    children = list(running._children.values())
    running.close()
    assert children and all(child._child is None for child in children)


ANSWERS = """    def execute(self, requests):
        x = pb_utils.get_input_tensor_by_name(requests[0], "x").as_numpy()
        if x[0] == 1:
            return [pb_utils.InferenceResponse(error=pb_utils.TritonError("one"))]
        if x[0] == 2:
            raise KeyError("two")
        if x[0] == 3:
            return [None]
        return [pb_utils.InferenceResponse([pb_utils.Tensor("y", x * 2)])]

    def finalize(self):
        print("finalized")
"""


def test_the_child_answers_each_call_as_the_model_does(tmp_path: Path) -> None:
    """One child, many calls: outputs, an error response, a raise and a broken answer, each said as in process.
    On conch's own Python, so that the child's side is measured too."""
    import sys

    from conch.compiler.compiled import compile_ensemble
    from conch.executor import ChildPython, pb_utils_path

    plan = compile_ensemble(handmade(ANSWERS, tmp_path), "local", "24.10")
    python = ChildPython(Path(sys.executable), f"{sys.version_info.major}.{sys.version_info.minor}", "24.10",
                         pb_utils_path())
    with conch.Executor(plan, python=python) as running:
        assert running.run({"X": np.full(4, 5, np.float32)}).outputs["Y"].tolist() == [10.0] * 4
        for first, message in ((1, r"answered with an error: one$"), (2, r"raised KeyError: 'two'$"),
                               (3, r"execute\(\) returned NoneType for a request; answer each request with a "
                                   r"pb_utils.InferenceResponse$")):
            with pytest.raises(RunError, match=r"ensemble 'handmade', step 'model' \(python_model\):? " + message):
                running.run({"X": np.full(4, first, np.float32)})


def test_a_child_whose_conch_stopped_listening_ends_without_a_traceback(tmp_path: Path) -> None:
    """A build stops reading a step's child when another step fails to load: the child's answer meets a closed
    pipe, and it ends quietly (no BrokenPipeError traceback in the build's output)."""
    import io
    import json
    import os
    import subprocess
    import sys

    from conch import model_worker, stub_types
    from conch.backends.standins import standin_bridge as bridge
    from conch.executor import pb_utils_path

    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "model.py").write_text("class TritonPythonModel:\n    def execute(self, requests):\n"
                                             "        return []\n")
    hello = io.BytesIO()
    bridge._write(hello, bridge._OK, json.dumps({"folder": str(tmp_path), "version": "1", "name": "m",
                                                 "config": "{}", "outputs": [], "paths": []}).encode())
    read, write = os.pipe()
    os.close(read)  # nobody listens
    try:
        done = subprocess.run([sys.executable, "-I", model_worker.__file__, str(pb_utils_path()), stub_types.__file__,
                               bridge.__file__], input=hello.getvalue(), stdout=write, stderr=subprocess.PIPE,
                              cwd=tmp_path, timeout=60)
    finally:
        os.close(write)
    assert done.returncode == 0 and done.stderr == b"", done.stderr.decode()
