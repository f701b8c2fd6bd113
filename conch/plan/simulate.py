"""The MME platform in miniature: a fleet of instances, each keeping its loaded models in least-recently-used
order within a memory budget, and SageMaker's routing, which sends a request
to an instance that has its model loaded and otherwise picks one to load it on."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


def zipf_weights(count: int, skew: float) -> np.ndarray:
    """Request share of each of ``count`` models, rank 1 first (skew 0: uniform)."""
    weights = 1.0 / np.arange(1, count + 1) ** skew
    return weights / weights.sum()


def zipf_trace(count: int, length: int, skew: float, seed: int = 0) -> list[int]:
    """``length`` model indices drawn independently with Zipf popularity."""
    rng = np.random.default_rng(seed)
    return [int(i) for i in rng.choice(count, size=length, p=zipf_weights(count, skew))]


@dataclass
class SimResult:
    requests: int
    hits: int
    loads: int
    evictions: int
    wait_s: float  # summed ModelLoadingWaitTime over the counted requests
    loaded_peak: int

    @property
    def hit_rate(self) -> float:
        return self.hits / self.requests if self.requests else 1.0

    @property
    def miss_rate(self) -> float:
        return 1.0 - self.hit_rate

    @property
    def mean_wait_s(self) -> float:
        return self.wait_s / self.requests if self.requests else 0.0


class Instance:
    def __init__(self, memory: int) -> None:
        self.memory = memory
        self.lru: OrderedDict[int, int] = OrderedDict()  # model -> bytes, least recently used first
        self.used = 0
        self.served = 0

    def load(self, model: int, size: int) -> list[int]:
        """Load ``model``, unloading least-recently-used ones until it fits; returns the unloaded."""
        evicted = []
        while self.lru and self.used + size > self.memory:
            old, old_size = self.lru.popitem(last=False)
            self.used -= old_size
            evicted.append(old)
        self.lru[model] = size
        self.used += size
        return evicted


def simulate(trace: Sequence[int], sizes: Sequence[int], load_s: Sequence[float], instances: int,
             memory: int, *, warmup: int = 0) -> SimResult:
    """Replay ``trace`` (model indices) on ``instances`` instances of ``memory`` bytes for models; counts
    hits, loads and ModelLoadingWaitTime over the requests after the first ``warmup``."""
    fleet = [Instance(memory) for _ in range(instances)]
    holders: dict[int, set[int]] = {}
    hits = loads = evictions = peak = 0
    wait = 0.0
    for n, model in enumerate(trace):
        counted = n >= warmup
        where = holders.get(model)
        if where:
            chosen = min(where, key=lambda i: fleet[i].served)  # spread a model's traffic over its copies
            fleet[chosen].lru.move_to_end(model)
            hits += counted
        else:
            # SageMaker picks an instance for a model loaded nowhere: here the one with the most free memory.
            chosen = min(range(instances), key=lambda i: (fleet[i].used, fleet[i].served))
            for old in fleet[chosen].load(model, sizes[model]):
                holders[old].discard(chosen)
                evictions += counted
            holders.setdefault(model, set()).add(chosen)
            loads += counted
            wait += load_s[model] if counted else 0.0
        fleet[chosen].served += 1
        peak = max(peak, len(fleet[chosen].lru))
    return SimResult(max(len(trace) - warmup, 0), hits, loads, evictions, wait, peak)
