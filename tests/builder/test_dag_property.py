"""Property: a random multi-step DAG over every backend conch can stand in locally (Python, ONNX, TensorRT
from its ONNX source, TensorFlow, TorchScript, DALI) that conch accepts is built, passes `conch check`,
loads in the real tritonserver and answers a request exactly as `conch run` answers it in this process;
one it refuses (a step declared against its model: a wrong dtype or dims) is refused with that kind's
exact message, at declaration or build, never at load. A minimum share of the DAGs must be accepted, so
the property cannot pass by refusing everything."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import basic_steps
import dali_pipelines
import numpy as np
import onnx_models
import pytest
import tf_graphs
import torch_modules
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conch import (
    ConchError,
    DaliStep,
    Ensemble,
    OnnxStep,
    PythonStep,
    Tensor,
    TensorFlowStep,
    TensorRTStep,
    TorchScriptStep,
)
from conch.builder.build import build_ensemble
from conch.builder.check import check_archive
from conch.builder.extract import safe_extract
from conch.ensembles.step import Step
from conch.harness.mme import MultiModelClient
from conch.harness.server import LocalTriton
from conch.run import run

pytestmark = pytest.mark.integration

KINDS = ("python", "onnx", "tensorrt", "tensorflow", "pytorch", "dali")
OPAQUE_PLAN = b"prebuilt TensorRT engine bytes"  # a plan is built on a GPU only; locally the ONNX source runs


def _step(kind: str, name: str, folder: Path, dtype: str = "FP32", dims: tuple[int, ...] = (4,)) -> Step:
    """One step of ``kind`` computing y = 2x (Python) or y = 2x + 1 (the others) over FP32 [4]; ``dtype``
    and ``dims`` declare its input otherwise than its model has it (a wrong declaration)."""
    if kind == "python":
        return PythonStep(name, basic_steps.double, [Tensor("x", dtype, list(dims))], [Tensor("y", "FP32", [4])],
                          max_batch_size=8)
    if kind == "onnx":
        return OnnxStep(name, onnx_models.affine(folder / "affine.onnx"), max_batch_size=8,
                        inputs=[Tensor("x", dtype, list(dims))], outputs=[Tensor("y", "FP32", [4])])
    if kind == "tensorrt":
        return TensorRTStep(name, plan=OPAQUE_PLAN, onnx=onnx_models.affine(folder / "affine.onnx"), max_batch_size=8,
                            inputs=[Tensor("x", dtype, list(dims))], outputs=[Tensor("y", "FP32", [4])])
    if kind == "tensorflow":
        return TensorFlowStep(name, tf_graphs.affine(), max_batch_size=8,
                              inputs=[Tensor("inputs/x", dtype, list(dims))], outputs=[Tensor("affine/y", "FP32", [4])])
    if kind == "pytorch":
        return TorchScriptStep(name, torch_modules.affine(), [Tensor("INPUT__0", dtype, list(dims))],
                               [Tensor("OUTPUT__0", "FP32", [4])], max_batch_size=8)
    assert kind == "dali"
    return DaliStep(name, dali_pipelines.affine, [Tensor("DALI_INPUT_0", dtype, list(dims))],
                    [Tensor("DALI_OUTPUT_0", "FP32", [4])], max_batch_size=8, num_threads=2)


# A wrong declaration per backend and the exact message conch refuses it with ({e}: ensemble, {s}: step).
WRONG: dict[str, tuple[str, tuple[int, ...], str]] = {
    "python": ("FP32", (3,), "ensemble {e!r}: step {s!r}: input 'x' is FP32 [3], but it is given {src} FP32 [4]"),
    "onnx": ("FP32", (5,), "ensemble {e!r}: step {s!r}: input 'x' is declared with dims [5] but affine.onnx has [4]"),
    "tensorrt": ("FP16", (4,), "ensemble {e!r}: step {s!r}: input 'x' is declared FP16 but affine.onnx has FP32"),
    "tensorflow": ("FP64", (4,), "ensemble {e!r}: step {s!r}: input 'inputs/x' is declared FP64 but model.graphdef "
                                 "has FP32"),
    "pytorch": ("FP32", (5,), "ensemble {e!r}: pytorch step {s!r}: running model.pt on zeros shaped like the declared "
                              "inputs (INPUT__0: FP32 [2, 5]) failed: RuntimeError: mat1 and mat2 shapes cannot be "
                              "multiplied (2x5 and 4x4)"),
    "dali": ("INT32", (4,), "ensemble {e!r}: dali step {s!r}: input 'DALI_INPUT_0' is declared INT32 but the "
                            "pipeline's external_source 'DALI_INPUT_0' has dtype FP32"),
}


@dataclass(frozen=True)
class Node:
    kind: str
    reads: tuple[int, ...]  # indexes into the tensors so far: 0 is the ensemble input X
    wrong: bool  # declared against its model (the DAG must then be refused)


@st.composite
def dags(draw: st.DrawFn) -> tuple[Node, ...]:
    """2 to 4 steps; each reads one earlier tensor (a chain or branches), a Python step sometimes two."""
    nodes = []
    for i in range(draw(st.integers(2, 4))):
        kind = draw(st.sampled_from(KINDS))
        fan_in = 2 if kind == "python" and draw(st.integers(0, 2)) == 0 else 1
        reads = tuple(draw(st.lists(st.integers(0, i), min_size=fan_in, max_size=fan_in)))
        nodes.append(Node(kind, reads, wrong=draw(st.integers(0, 9)) == 0))
    return tuple(nodes)


def declare(name: str, nodes: tuple[Node, ...], folder: Path) -> tuple[Ensemble, str | None]:
    """The DAG through the public API, and the message its first wrong step must be refused with."""
    ens = Ensemble(name, max_batch_size=8)
    tensors = [ens.input("X", "FP32", [4])]
    expected = None
    for i, node in enumerate(nodes):
        step_name = f"{node.kind}{i}"
        if node.reads[1:]:
            two_in = [Tensor("a", "FP32", [4]), Tensor("b", "FP32", [4])]
            two_out = [Tensor("s", "FP32", [4]), Tensor("d", "FP32", [4])]
            step: Step = PythonStep(step_name, basic_steps.split_sum, two_in, two_out, max_batch_size=8)
        elif node.wrong:
            dtype, dims, message = WRONG[node.kind]
            step = _step(node.kind, step_name, folder, dtype, dims)
            source = "ensemble input 'X'" if node.reads[0] == 0 else "a tensor"
            expected = expected or message.format(e=name, s=step_name, src=source)
        else:
            step = _step(node.kind, step_name, folder)
        out = step(*(tensors[r] for r in node.reads))
        tensors.extend(out if isinstance(out, tuple) else [out])
    consumed = {id(h) for call in ens.calls for h in call.inputs.values()}
    for n, handle in enumerate(h for h in tensors[1:] if id(h) not in consumed):
        ens.output(f"OUT_{n}", handle)
    return ens, expected


@dataclass
class Outcome:
    accepted: int = 0
    refused: Counter[str] = field(default_factory=Counter)  # by the backend of the wrong step
    kinds_answered: set[str] = field(default_factory=set)


def holds(nodes: tuple[Node, ...], index: int, tmp: Path, triton: LocalTriton, outcome: Outcome) -> None:
    name = f"dag{index}"
    folder = tmp / name
    folder.mkdir()
    try:
        ens, expected = declare(name, nodes, folder)
        archive = build_ensemble(ens, folder / "dist", "local")
    except ConchError as exc:
        wrong = next((n for n in nodes if n.wrong), None)
        assert wrong is not None, f"{nodes} refused although every step is declared as its model is: {exc}"
        assert str(exc) == expected, (nodes, str(exc))
        outcome.refused[wrong.kind] += 1
        return
    assert expected is None, f"{nodes} built although a step is declared against its model"
    report = check_archive(archive)
    assert report.ok, report.lines()
    target = f"{name}.tar.gz"
    unpacked = triton.workdir / "models" / f"dagprop-{name}"
    safe_extract(archive, unpacked)
    client = MultiModelClient(triton.sagemaker_url, triton.http_url)
    client.load(target, unpacked, timeout=300)  # a refusal here is the bug this test hunts
    try:
        x = np.random.default_rng(index).normal(size=(3, 4)).astype(np.float32)
        served = client.invoke_json(target, {"X": x})
        local = run(ens, {"X": x})
        assert set(served) == set(local.outputs), (served.keys(), local.outputs.keys())
        for key, value in local.outputs.items():
            np.testing.assert_allclose(served[key], value, rtol=1e-5, atol=1e-4, err_msg=f"{nodes}: output {key}")
    finally:
        client.unload(target)
    outcome.accepted += 1
    outcome.kinds_answered.update(n.kind for n in nodes)


def check_dags(examples: int, derandomize: bool, tmp: Path, triton: LocalTriton) -> Outcome:
    outcome = Outcome()
    counter = iter(range(10**6))

    @settings(max_examples=examples, deadline=None, derandomize=derandomize, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(nodes=dags())
    def property_(nodes: tuple[Node, ...]) -> None:
        holds(nodes, next(counter), tmp, triton, outcome)

    property_()
    return outcome


def test_random_dags_over_every_backend_serve_what_conch_run_computes(
    tmp_path_factory: pytest.TempPathFactory, triton: LocalTriton
) -> None:
    outcome = check_dags(6, True, tmp_path_factory.mktemp("dags"), triton)
    total = outcome.accepted + sum(outcome.refused.values())
    assert outcome.accepted >= 0.5 * total, outcome
    assert outcome.kinds_answered == set(KINDS), outcome


@pytest.mark.slow
def test_many_more_random_dags(tmp_path_factory: pytest.TempPathFactory, triton: LocalTriton) -> None:
    outcome = check_dags(60, False, tmp_path_factory.mktemp("dags"), triton)
    total = outcome.accepted + sum(outcome.refused.values())
    assert outcome.accepted >= 0.5 * total and outcome.refused, outcome

