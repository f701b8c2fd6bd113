"""Per-model figures of one run: the difference of two snapshots of Triton's statistics extension
(``GET /v2/models/stats``, cumulative count + nanoseconds per category since the model loaded)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

CATEGORIES = ("queue", "compute_input", "compute_infer", "compute_output")
Snapshot = Mapping[str, Mapping[str, Any]]  # model name -> its entry of ``model_stats``


@dataclass(frozen=True)
class ModelFigures:
    """What one model did during the run: counts, and mean milliseconds per request of each category.

    ``requests`` are successful requests (``success.count``); ``inferences`` count batch rows, ``executions``
    the model's executions, so ``inferences / executions`` is the batch size achieved."""

    name: str
    requests: int
    failures: int
    inferences: int
    executions: int
    request_ms: float  # success.ns / success.count: the request as the model saw it, queue included
    queue_ms: float
    compute_input_ms: float
    compute_infer_ms: float
    compute_output_ms: float
    batch_sizes: Mapping[int, int] = field(default_factory=dict)  # batch size -> executions of that size

    @property
    def batch_size(self) -> float:
        """Rows per execution: Triton's batch size (a request of two rows counts two)."""
        return self.inferences / self.executions if self.executions else 0.0

    @property
    def requests_per_execution(self) -> float:
        """Requests run together per execution: what dynamic batching achieved (1.0: none were merged)."""
        return self.requests / self.executions if self.executions else 0.0

    @property
    def work_ms(self) -> float:
        """Queue + compute input + infer + output: the step's part of a request. Its request time is longer:
        it ends when the ensemble releases the request, after the next step has its tensors."""
        return self.queue_ms + self.compute_input_ms + self.compute_infer_ms + self.compute_output_ms

    @property
    def queue_share(self) -> float:
        """Queue time as a share of the step's time (0 when it saw no requests)."""
        return self.queue_ms / self.work_ms if self.work_ms else 0.0

    def to_json(self) -> dict[str, Any]:
        return {"model": self.name, "requests": self.requests, "failures": self.failures,
                "inferences": self.inferences, "executions": self.executions,
                "batch_size_achieved": round(self.batch_size, 3),
                "requests_per_execution": round(self.requests_per_execution, 3),
                "request_ms": round(self.request_ms, 3),
                "queue_ms": round(self.queue_ms, 3), "compute_input_ms": round(self.compute_input_ms, 3),
                "compute_infer_ms": round(self.compute_infer_ms, 3),
                "compute_output_ms": round(self.compute_output_ms, 3), "step_ms": round(self.work_ms, 3),
                "queue_share": round(self.queue_share, 4),
                "batch_sizes": {str(k): v for k, v in sorted(self.batch_sizes.items())}}


def _count_ns(entry: Mapping[str, Any], key: str) -> tuple[int, int]:
    stat = entry.get("inference_stats", {}).get(key, {})
    return int(stat.get("count", 0)), int(stat.get("ns", 0))


def _batches(entry: Mapping[str, Any]) -> dict[int, int]:
    found: dict[int, int] = {}
    for b in entry.get("batch_stats", []) or []:
        found[int(b["batch_size"])] = int(b.get("compute_infer", {}).get("count", 0))
    return found


def difference(name: str, before: Mapping[str, Any] | None, after: Mapping[str, Any]) -> ModelFigures:
    """One model's figures between two snapshots (``before`` None: since it loaded)."""
    def delta(key: str) -> tuple[int, int]:
        c1, n1 = _count_ns(after, key)
        c0, n0 = _count_ns(before, key) if before else (0, 0)
        return c1 - c0, n1 - n0

    def mean(key: str, count: int) -> float:
        return delta(key)[1] / count / 1e6 if count else 0.0

    requests, success_ns = delta("success")
    failures = delta("fail")[0]
    counters = [int(after.get(k, 0)) - int((before or {}).get(k, 0)) for k in ("inference_count", "execution_count")]
    b1, b0 = _batches(after), _batches(before) if before else {}
    batches = {size: n - b0.get(size, 0) for size, n in b1.items() if n - b0.get(size, 0) > 0}
    queue, compute_input, compute_infer, compute_output = (mean(key, requests) for key in CATEGORIES)
    return ModelFigures(name, requests, failures, counters[0], counters[1],
                        success_ns / requests / 1e6 if requests else 0.0, queue, compute_input, compute_infer,
                        compute_output, batches)
