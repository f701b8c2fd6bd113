"""Check the simulation against the local MME: replay one trace of TargetModels on both and compare the
cache hit rates (SageMaker's ModelCacheHit)."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass

from conch.errors import BenchError
from conch.harness.load.spec import Target
from conch.plan.simulate import simulate


@dataclass(frozen=True)
class HitRates:
    predicted: float
    measured: float
    requests: int

    @property
    def error(self) -> float:
        return abs(self.predicted - self.measured)


def replay_trace(url: str, endpoint: str, targets: Sequence[Target], trace: Sequence[int],
                 timeout: float = 300.0) -> None:
    """Send the trace in order, one request at a time, through the SageMaker runtime API at ``url``."""
    import httpx

    from conch.wire import TARGET_HEADER

    with httpx.Client(timeout=timeout) as http:
        for index in trace:
            target = targets[index]
            request = target.requests[0]
            answer = http.post(f"{url}/endpoints/{endpoint}/invocations", content=base64.b64decode(request.body),
                               headers={"Content-Type": request.content_type, TARGET_HEADER: target.name})
            if answer.status_code != 200:
                raise BenchError(f"{target.name}: HTTP {answer.status_code} {answer.text[:200]}")


def compare_hit_rate(mme: object, targets: Sequence[Target], trace: Sequence[int], max_loaded: int) -> HitRates:
    """Replay ``trace`` on a running LocalMME started with ``max_loaded`` and on the simulation of one such
    instance; the MME's hit rate is read from its metrics as the difference over the replay."""
    before = mme.metrics_json()["ModelCacheHit"]  # type: ignore[attr-defined]
    replay_trace(mme.url, mme.endpoint_name, targets, trace)  # type: ignore[attr-defined]
    after = mme.metrics_json()["ModelCacheHit"]  # type: ignore[attr-defined]
    hits, misses = after["hits"] - before["hits"], after["misses"] - before["misses"]
    if hits + misses != len(trace):
        raise BenchError(f"the MME counted {hits + misses} invocations for a trace of {len(trace)}")
    predicted = simulate(trace, [1] * len(targets), [0.0] * len(targets), 1, max_loaded).hit_rate
    return HitRates(predicted, hits / len(trace), len(trace))
