"""The generated model.py in the real tritonserver: a single request takes the fast path (no
concatenate/split) and answers exactly what the batched path answers; outputs are checked against
their declared dims, not only dtype and batch size."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import fastpath_steps
import numpy as np
import pytest

from conch import DynamicBatching, Ensemble, PythonStep, Tensor
from conch.builder.repository_build import build_ensemble
from conch.replays.local_replay import stage
from conch.triton.mme import InvokeError, MultiModelClient
from conch.triton.server import LocalTriton

pytestmark = pytest.mark.integration


def load(triton: LocalTriton, ens: Ensemble, tmp_path: Path) -> tuple[MultiModelClient, str]:
    archive = build_ensemble(ens, tmp_path, "local")
    client = MultiModelClient(triton.sagemaker_url, triton.http_url)
    client.load(archive.name, stage(archive, triton), timeout=120)
    return client, archive.name


def test_single_requests_answer_exactly_what_batched_calls_answer(tmp_path: Path, triton: LocalTriton) -> None:
    ens = Ensemble("fastpath", max_batch_size=16)
    step = PythonStep("scale", fastpath_steps.scale_and_count, inputs=[Tensor("x", "FP32", [16])],
                      outputs=[Tensor("y", "FP32", [16]), Tensor("rows", "INT32", [1])], max_batch_size=16,
                      dynamic_batching=DynamicBatching(max_queue_delay_microseconds=200_000))
    y, rows = step(ens.input("X", "FP32", [16]))
    ens.output("Y", y)
    ens.output("ROWS", rows)
    client, name = load(triton, ens, tmp_path)
    rng = np.random.default_rng(7)
    payloads = [rng.standard_normal((1 + i % 3, 16)).astype(np.float32) for i in range(24)]

    singles = [client.invoke_binary(name, {"X": p}) for p in payloads]  # one at a time: never batched
    assert all(int(s["ROWS"].max()) == len(p) for s, p in zip(singles, payloads, strict=True))
    with ThreadPoolExecutor(len(payloads)) as pool:  # all at once: Triton merges them within 0.2 s
        together = list(pool.map(lambda p: client.invoke_binary(name, {"X": p}), payloads))

    assert any(int(t["ROWS"].max()) > len(p) for t, p in zip(together, payloads, strict=True)), (
        "no request went through the batched path"
    )
    for single, batched, payload in zip(singles, together, payloads, strict=True):
        assert single["Y"].shape == batched["Y"].shape == payload.shape
        assert single["Y"].tobytes() == batched["Y"].tobytes()


@pytest.mark.parametrize(("code", "dims"), [(fastpath_steps.flat_sum, [1]), (fastpath_steps.wrong_width, [2])])
def test_an_output_of_other_dims_than_declared_names_step_and_output(
    code: object, dims: list[int], tmp_path: Path, triton: LocalTriton
) -> None:
    ens = Ensemble(f"dims_{code.__name__}", max_batch_size=4)  # type: ignore[attr-defined]
    step = PythonStep("summed", code, inputs=[Tensor("x", "FP32", [2])], outputs=[Tensor("total", "FP32", dims)],  # type: ignore[arg-type]
                      max_batch_size=4)
    ens.output("TOTAL", step(ens.input("X", "FP32", [2])))
    client, name = load(triton, ens, tmp_path)
    with pytest.raises(InvokeError) as caught:
        client.invoke_binary(name, {"X": np.ones((3, 2), np.float32)})
    message = str(caught.value)
    assert f"step 'summed' of ensemble '{ens.name}'" in message
    assert "output 'total'" in message and f"declared with dims {dims}" in message
