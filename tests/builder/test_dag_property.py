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
from hypothesis import HealthCheck, example, given, settings
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
from conch.archive.extract import safe_extract
from conch.archive.fleet_check import check_archive_models
from conch.builder.repository_build import build_ensemble
from conch.ensembles.step import Step
from conch.executor import run
from conch.triton.mme import MultiModelClient
from conch.triton.server import LocalTriton

pytestmark = pytest.mark.integration

KINDS = ("python", "onnx", "tensorrt", "tensorflow", "pytorch", "dali")
OPAQUE_PLAN = b"prebuilt TensorRT engine bytes"  # a plan is built on a GPU only; locally the ONNX source runs


def _step(kind: str, name: str, folder: Path, dtype: str = "FP32", dims: tuple[int, ...] = (4,)) -> Step:
    """One step of ``kind`` computing y = 2x (Python) or y = 2x + 1 (the others) over FP32 [4]; ``dtype``
    and ``dims`` declare its input otherwise than its model has it (a wrong declaration)."""
    if kind == "python":
        return PythonStep(name, basic_steps.double, inputs=[Tensor("x", dtype, list(dims))],
                          outputs=[Tensor("y", "FP32", [4])],
                          max_batch_size=8)
    if kind == "onnx":
        return OnnxStep(name, onnx_models.affine(folder / "affine.onnx"), max_batch_size=8,
                        inputs=[Tensor("x", dtype, list(dims))], outputs=[Tensor("y", "FP32", [4])])
    if kind == "tensorrt":
        return TensorRTStep(name, plan=OPAQUE_PLAN, source=onnx_models.affine(folder / "affine.onnx"), max_batch_size=8,
                            inputs=[Tensor("x", dtype, list(dims))], outputs=[Tensor("y", "FP32", [4])])
    if kind == "tensorflow":
        return TensorFlowStep(name, tf_graphs.affine(), max_batch_size=8,
                              inputs=[Tensor("inputs/x", dtype, list(dims))], outputs=[Tensor("affine/y", "FP32", [4])])
    if kind == "pytorch":
        return TorchScriptStep(name, torch_modules.affine(), inputs=[Tensor("INPUT__0", dtype, list(dims))],
                               outputs=[Tensor("OUTPUT__0", "FP32", [4])], max_batch_size=8)
    assert kind == "dali"
    return DaliStep(name, dali_pipelines.affine, inputs=[Tensor("DALI_INPUT_0", dtype, list(dims))],
                    outputs=[Tensor("DALI_OUTPUT_0", "FP32", [4])], max_batch_size=8, num_threads=2)


INPUT_NAME = {"python": "x", "onnx": "x", "tensorrt": "x", "tensorflow": "inputs/x", "pytorch": "INPUT__0",
              "dali": "DALI_INPUT_0"}

# A step declared against its model, per backend, and the exact message the build refuses it with ({e}: the
# ensemble, {s}: the step); the step reads an ensemble input declared as wrongly, so the wires agree.
AGAINST_THE_MODEL: dict[str, tuple[str, tuple[int, ...], str]] = {
    "onnx": ("FP32", (5,), "ensemble {e!r}: step {s!r}: input 'x' is declared with dims [5] but affine.onnx "
                           "has [4]"),
    "tensorrt": ("FP16", (4,), "ensemble {e!r}: step {s!r}: input 'x' is declared FP16 but affine.onnx "
                               "has FP32"),
    "tensorflow": ("FP64", (4,), "ensemble {e!r}: step {s!r}: input 'inputs/x' is declared FP64 but "
                                 "model.graphdef has FP32"),
    "pytorch": ("FP32", (5,), "ensemble {e!r}: pytorch step {s!r}: running model.pt on zeros shaped like the "
                              "declared inputs (INPUT__0: FP32 [2, 5]) failed: RuntimeError: mat1 and mat2 shapes "
                              "cannot be multiplied (2x5 and 4x4); check the inputs' dtypes and dims (or pass "
                              "probe=False if the model cannot run on zeros)"),
    "dali": ("INT32", (4,), "ensemble {e!r}: dali step {s!r}: input 'DALI_INPUT_0' is declared INT32 but the "
                            "pipeline's external_source 'DALI_INPUT_0' has dtype FP32"),
}
# A step whose input is declared [3] reading the ensemble input X (FP32 [4]): refused where it is wired.
MISWIRED = ("ensemble {e!r}, step {s!r}, input {i!r}: expects dims [3] but ensemble input 'X' has dims [4] "
            "(-1 matches any size)")


UNUSED_X = "ensemble {e!r}: input 'X' is not used by any step; pass it to a step or remove it"


@dataclass(frozen=True)
class Node:
    kind: str
    reads: tuple[int, ...]  # indexes into the tensors so far: 0 is the ensemble input X
    wrong: str | None  # None, "model" (declared against its model) or "wire" (declared against its input)


@st.composite
def dags(draw: st.DrawFn) -> tuple[Node, ...]:
    """2 to 4 steps; each reads one earlier tensor (a chain or branches), a Python step sometimes two; about
    one step in ten is declared wrongly."""
    nodes = []
    for i in range(draw(st.integers(2, 4))):
        kind = draw(st.sampled_from(KINDS))
        wrong = draw(st.sampled_from([None] * 18 + ["model", "wire"]))
        if wrong == "model" and kind == "python":
            wrong = "wire"  # a Python step has no model file to disagree with
        fan_in = 2 if kind == "python" and not wrong and draw(st.integers(0, 2)) == 0 else 1
        reads = (0,) if wrong else tuple(draw(st.lists(st.integers(0, i), min_size=fan_in, max_size=fan_in)))
        nodes.append(Node(kind, reads, wrong))
    return tuple(nodes)


def expected_refusal(name: str, nodes: tuple[Node, ...]) -> tuple[str, str] | None:
    """(kind of refusal, exact message) for the first wrong step: a miswired one is refused where it is
    declared, before any step declared against its model is refused by the build."""
    wired = next((i for i, node in enumerate(nodes) if node.wrong == "wire"), None)
    if wired is None and not any(0 in node.reads for node in nodes if node.wrong != "model"):
        # every step reads an input of its own (each declared against its model): X feeds nothing
        return "unused input", UNUSED_X.format(e=name)
    for want in ("wire", "model"):
        for i, node in enumerate(nodes):
            if node.wrong == want:
                step = f"{node.kind}{i}"
                if want == "wire":
                    return f"miswired {node.kind}", MISWIRED.format(e=name, s=step, i=INPUT_NAME[node.kind])
                return f"{node.kind} against its model", AGAINST_THE_MODEL[node.kind][2].format(e=name, s=step)
    return None


def declare(name: str, nodes: tuple[Node, ...], folder: Path) -> Ensemble:
    """The DAG through the public API."""
    ens = Ensemble(name, max_batch_size=8)
    tensors = [ens.input("X", "FP32", [4])]
    for i, node in enumerate(nodes):
        step_name = f"{node.kind}{i}"
        reads = [tensors[r] for r in node.reads]
        if node.reads[1:]:
            two_in = [Tensor("a", "FP32", [4]), Tensor("b", "FP32", [4])]
            two_out = [Tensor("s", "FP32", [4]), Tensor("d", "FP32", [4])]
            step: Step = PythonStep(step_name, basic_steps.split_sum, inputs=two_in, outputs=two_out, max_batch_size=8)
        elif node.wrong == "model":
            dtype, dims, _ = AGAINST_THE_MODEL[node.kind]
            step = _step(node.kind, step_name, folder, dtype, dims)
            reads = [ens.input(f"W{i}", dtype, list(dims))]
        elif node.wrong == "wire":
            step = _step(node.kind, step_name, folder, "FP32", (3,))
        else:
            step = _step(node.kind, step_name, folder)
        out = step(*reads)
        tensors.extend(out if isinstance(out, tuple) else [out])
    consumed = {id(h) for call in ens.calls for h in call.inputs.values()}
    for n, handle in enumerate(h for h in tensors[1:] if id(h) not in consumed):
        ens.output(f"OUT_{n}", handle)
    return ens


@dataclass
class Outcome:
    accepted: int = 0
    refused: Counter[str] = field(default_factory=Counter)  # by kind of refusal
    kinds_answered: set[str] = field(default_factory=set)


def holds(nodes: tuple[Node, ...], index: int, tmp: Path, triton: LocalTriton, outcome: Outcome) -> None:
    name = f"dag{index}"
    folder = tmp / name
    folder.mkdir()
    expected = expected_refusal(name, nodes)
    try:
        ens = declare(name, nodes, folder)
        archive = build_ensemble(ens, folder / "dist", "local")
    except ConchError as exc:
        assert expected is not None, f"{nodes} refused although every step is declared as its model is: {exc}"
        assert str(exc) == expected[1], (nodes, expected[0])
        outcome.refused[expected[0]] += 1
        return
    assert expected is None, f"{nodes} built although a step is declared wrongly: {expected}"
    report = check_archive_models(archive)[0]
    assert report.ok, report.lines()
    target = f"{name}.tar.gz"
    unpacked = triton.workdir / "models" / f"dagprop-{name}"
    safe_extract(archive, unpacked)
    client = MultiModelClient(triton.sagemaker_url, triton.http_url, server=triton)
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


# Every backend in one chain with a Python fan-in, and one DAG per way of declaring a step wrongly: the default
# run proves each, whatever the random draws add.
EVERY_BACKEND = (Node("python", (0,), None), Node("onnx", (1,), None), Node("tensorrt", (2,), None),
                 Node("tensorflow", (3,), None), Node("pytorch", (4,), None), Node("dali", (5,), None),
                 Node("python", (6, 1), None))
EACH_REFUSAL = [(Node("python", (0,), None), Node(kind, (0,), "model")) for kind in AGAINST_THE_MODEL] + [
    (Node("onnx", (0,), None), Node("python", (0,), "wire"))]


def check_dags(examples: int, derandomize: bool, tmp: Path, triton: LocalTriton) -> Outcome:
    outcome = Outcome()
    counter = iter(range(10**6))

    @settings(max_examples=examples, deadline=None, derandomize=derandomize, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(nodes=dags())
    def property_(nodes: tuple[Node, ...]) -> None:
        holds(nodes, next(counter), tmp, triton, outcome)

    for nodes in (EVERY_BACKEND, *EACH_REFUSAL, (Node("onnx", (0,), "model"), Node("onnx", (0,), "model"))):
        property_ = example(nodes=nodes)(property_)
    property_()
    return outcome


def test_random_dags_over_every_backend_serve_what_conch_run_computes(
    tmp_path_factory: pytest.TempPathFactory, triton_alone: LocalTriton
) -> None:
    outcome = check_dags(2, True, tmp_path_factory.mktemp("dags"), triton_alone)
    total = outcome.accepted + sum(outcome.refused.values())
    assert outcome.accepted >= 0.25 * total, outcome
    assert outcome.kinds_answered == set(KINDS), outcome
    assert set(outcome.refused) >= {f"{k} against its model" for k in AGAINST_THE_MODEL} | {"miswired python"}


@pytest.mark.slow
def test_many_more_random_dags(tmp_path_factory: pytest.TempPathFactory, triton_alone: LocalTriton) -> None:
    outcome = check_dags(60, False, tmp_path_factory.mktemp("dags"), triton_alone)
    total = outcome.accepted + sum(outcome.refused.values())
    assert outcome.accepted >= 0.5 * total, outcome
