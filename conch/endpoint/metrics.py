"""The MME metrics SageMaker publishes to CloudWatch, under the same names, in a Prometheus registry of the
endpoint's own (``GET /metrics``) and as JSON (``GET /metrics.json``).

Times are in seconds here (CloudWatch reports the same quantities in microseconds or milliseconds).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
TIMES = {
    "ModelLoadingWaitTime": "seconds an invocation waited for its TargetModel to be downloaded and loaded",
    "ModelDownloadingTime": "seconds to download and unpack an archive",
    "ModelLoadingTime": "seconds Triton took to load an archive (POST /models)",
    "ModelUnloadingTime": "seconds Triton took to unload an archive (DELETE /models/<hash>)",
    "ModelLatency": "seconds Triton took to answer an invocation",
}
KEEP = 10_000  # recent samples per timing kept for the JSON percentiles
STATUSES = ("2XX", "4XX", "5XX")


class Metrics:
    """Counters, gauges and timings of one local MME (prometheus_client's own, read back through its registry)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.times = {name: Histogram(name, doc, registry=r, buckets=BUCKETS) for name, doc in TIMES.items()}
        hits = Counter("ModelCacheHit", "invocations by whether their TargetModel was loaded already", ["hit"],
                       registry=r)
        self.hit, self.miss = hits.labels("1"), hits.labels("0")
        answered = Counter("Invocations", "invocations answered, by HTTP status class", ["status"], registry=r)
        self.answered = {status: answered.labels(status) for status in STATUSES}
        self.loads = Counter("ModelLoads", "archives loaded, by whether the TargetModel was loaded before",
                             ["reload"], registry=r)
        self.load_failures = Counter("ModelLoadFailures", "loads that failed or timed out", registry=r)
        self.unloads = Counter("ModelUnloads", "archives unloaded, by cause", ["reason"], registry=r)
        self.downloads = Counter("ModelDownloads", "archives downloaded and unpacked", registry=r)
        self.restarts = Counter("TritonRestarts", "tritonserver started again after it exited", registry=r)
        self.lookup_retries = Counter("TritonLookupRetries", "invocations asked again after Triton answered 'unknown "
                                      "model' for a loaded TargetModel (--retry-lookup)", registry=r)
        self.lookup_misses = Counter("TritonLookupMisses", "answers 'unknown model' from Triton for a TargetModel "
                                     "counted loaded (its unlocked name lookup raced a load or unload)", registry=r)
        self.collisions = Counter("StepNameCollisions", "TargetModels staged with step model names another "
                                  "TargetModel on the endpoint already uses (--step-names shared)", registry=r)
        self.not_ready = Counter("ModelNotReady", "invocations answered ModelNotReadyException (429): their "
                                 "TargetModel was still loading past the load wait", registry=r)
        self.timeouts = Counter("InvocationTimeouts", "invocations not answered within the invocation timeout",
                                registry=r)
        self.disk_evictions = Counter("ModelDiskEvictions", "unpacked archives deleted for the disk budget",
                                      registry=r)
        self.loaded = Gauge("LoadedModelCount", "TargetModels loaded now (unloading ones included)", registry=r)
        self.loaded_peak = Gauge("LoadedModelCountPeak", "highest LoadedModelCount so far", registry=r)
        self.max_loaded = Gauge("LoadedModelCountLimit", "--max-loaded (0: no limit)", registry=r)
        self.memory = Gauge("MemoryUsedBytes", "PSS of tritonserver and its Python stubs", registry=r)
        self.memory_budget = Gauge("MemoryBudgetBytes", "--memory-budget (0: no limit)", registry=r)
        self.disk = Gauge("DiskUsedBytes", "bytes of unpacked archives in the disk cache", registry=r)
        self.disk_budget = Gauge("DiskBudgetBytes", "--disk-budget (0: no limit)", registry=r)
        self._samples: dict[str, deque[float]] = {name: deque(maxlen=KEEP) for name in TIMES}
        self._lock = threading.Lock()

    def time(self, name: str, seconds: float) -> None:
        self.times[name].observe(seconds)
        with self._lock:
            self._samples[name].append(seconds)  # the oldest drops out past KEEP

    def set_loaded(self, count: int) -> None:
        self.loaded.set(count)
        with self._lock:
            if count > self.value("LoadedModelCountPeak"):
                self.loaded_peak.set(count)

    def prometheus(self) -> bytes:
        return generate_latest(self.registry)

    def value(self, name: str, labels: dict[str, str] | None = None) -> float:
        """A sample's value as the registry exposes it (0 when it has none yet)."""
        return self.registry.get_sample_value(name, labels) or 0.0

    def snapshot(self) -> dict[str, Any]:
        """Every metric as plain numbers: timings as count, sum and percentiles of recent samples."""
        out: dict[str, Any] = {}
        with self._lock:
            samples = {name: list(kept) for name, kept in self._samples.items()}
        for name, kept in samples.items():
            out[name] = summary(kept, self.value(f"{name}_count"), self.value(f"{name}_sum"))
        hits, misses = (int(self.value("ModelCacheHit_total", {"hit": hit})) for hit in ("1", "0"))
        out["ModelCacheHit"] = {"hits": hits, "misses": misses,
                                "rate": hits / (hits + misses) if hits + misses else None}
        out["Invocations"] = {status: int(self.value("Invocations_total", {"status": status})) for status in STATUSES}
        out["ModelLoads"] = {"cold": int(self.value("ModelLoads_total", {"reload": "false"})),
                             "reload": int(self.value("ModelLoads_total", {"reload": "true"}))}
        out["ModelUnloads"] = {s.labels["reason"]: int(s.value) for m in self.unloads.collect() for s in m.samples
                               if s.name == "ModelUnloads_total"}
        for family in self.registry.collect():  # every other counter and gauge (none has labels) by its name
            if family.type in ("counter", "gauge") and family.name not in out:
                out[family.name] = int(self.value(f"{family.name}_total" if family.type == "counter" else family.name))
        return out


def summary(samples: Iterable[float], count: float, total: float) -> dict[str, Any]:
    ordered = sorted(samples)

    def pct(q: float) -> float | None:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else None

    return {"count": int(count), "sum_s": total, "p50_s": pct(0.5), "p90_s": pct(0.9), "p99_s": pct(0.99),
            "max_s": ordered[-1] if ordered else None}


# What a run on the local endpoint reports besides its answers: each count is something a production endpoint
# does differently (a crash it would not restart from, a retry it would not make, step names it would share)
COUNTS = {"restarts": "TritonRestarts", "lookup_retries": "TritonLookupRetries",
          "lookup_misses": "TritonLookupMisses", "collisions": "StepNameCollisions",
          "not_ready": "ModelNotReady", "timeouts": "InvocationTimeouts"}
# The counts that make a run fail: the local endpoint was kinder than production would have been
LENIENT = ("restarts", "lookup_retries", "collisions")


def run_counts(before: dict[str, Any] | None, after: dict[str, Any]) -> dict[str, Any]:
    """The counts of ``COUNTS`` between two snapshots (``GET /metrics.json``), with the step-name mode; a
    metric the endpoint does not publish (an older conch, another server) is None."""
    counts: dict[str, Any] = {"step_names": after.get("step_names")}
    for key, metric in COUNTS.items():
        if metric in after:
            counts[key] = int(after[metric]) - int((before or {}).get(metric, 0))
        else:
            counts[key] = None
    return counts


def lenient(counts: dict[str, Any]) -> list[str]:
    """``["2 restarts", ...]`` for each count of ``LENIENT`` above zero."""
    return [f"{counts[k]} {k.replace('_', ' ')}" for k in LENIENT if counts.get(k)]
