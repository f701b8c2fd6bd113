"""The MME metrics SageMaker publishes to CloudWatch, under the same names, in a Prometheus registry of the
endpoint's own (``GET /metrics``) and as JSON (``GET /metrics.json``).

Times are in seconds here (CloudWatch reports the same quantities in microseconds or milliseconds).
"""

from __future__ import annotations

import bisect
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
TIMES = {
    "ModelLoadingWaitTime": "seconds an invocation waited for its TargetModel to be downloaded and loaded",
    "ModelDownloadingTime": "seconds to download and unpack an archive",
    "ModelLoadingTime": "seconds Triton took to load an archive (POST /models)",
    "ModelUnloadingTime": "seconds Triton took to unload an archive (DELETE /models/<hash>)",
    "ModelLatency": "seconds Triton took to answer an invocation",
}
KEEP = 10_000  # recent samples per timing kept for the JSON percentiles
PER_CALL = "ModelLatency"  # the timing every invocation records (``CallCounts``)
CACHE_HIT_DOC = "invocations by whether their TargetModel was loaded already"
INVOCATIONS_DOC = "invocations answered, by HTTP status class"


class Tally:
    """A count with ``inc()``, as a prometheus_client counter child, without its lock: every invocation counts on the
    front's event loop thread; it is read at scrape time (``CallCounts``)."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0

    def inc(self) -> None:
        self.value += 1


class Timing:
    """A histogram with ``observe()``, as prometheus_client's (the same buckets: the first upper bound the value
    does not pass), counted on the front's loop thread and read at scrape time."""

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one: +Inf
        self.count = 0
        self.sum = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, seconds)] += 1
        self.count += 1
        self.sum += seconds


class CallCounts(Collector):
    """The metrics every invocation moves (ModelCacheHit, Invocations, ModelLatency) as plain counts, exposed by
    prometheus_client at scrape time with the names, labels, buckets and ``_created`` samples its own Counter and
    Histogram would have (a prometheus_client counter takes a lock per ``inc``: ~1.7 us per call for the three)."""

    def __init__(self) -> None:
        self.created = time.time()
        self.hit, self.miss = Tally(), Tally()
        self.answered = {status: Tally() for status in ("2XX", "4XX", "5XX")}
        self.latency = Timing(BUCKETS)

    def collect(self) -> Iterator[Metric]:
        created = self.created
        latency = HistogramMetricFamily(PER_CALL, TIMES[PER_CALL])
        cumulative, buckets = 0, []
        for bound, count in zip((*self.latency.bounds, float("inf")), list(self.latency.counts), strict=True):
            cumulative += count
            buckets.append((floatToGoString(bound), float(cumulative)))
        latency.add_metric([], buckets, self.latency.sum)
        latency.samples.append(Sample(f"{PER_CALL}_created", {}, created))
        yield latency
        hits = CounterMetricFamily("ModelCacheHit", CACHE_HIT_DOC, labels=["hit"])
        for label, tally in (("1", self.hit), ("0", self.miss)):
            hits.add_metric([label], float(tally.value), created=created)
        yield hits
        answered = CounterMetricFamily("Invocations", INVOCATIONS_DOC, labels=["status"])
        for status, tally in self.answered.items():
            answered.add_metric([status], float(tally.value), created=created)
        yield answered


class Metrics:
    """Counters, gauges and timings of one local MME."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.times: dict[str, Histogram | Timing] = {
            name: Histogram(name, doc, registry=r, buckets=BUCKETS) for name, doc in TIMES.items() if name != PER_CALL}
        # the per-invocation ones as plain counts, exposed in the same place and order as before
        self.calls = CallCounts()
        r.register(self.calls)
        self.times[PER_CALL] = self.calls.latency
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
        self.resends = Counter("TritonHopResends", "invocations sent on another connection to Triton because the "
                               "kept one they took was already closed (nothing of them had been written)", registry=r)
        self.disk_evictions = Counter("ModelDiskEvictions", "unpacked archives deleted for the disk budget",
                                      registry=r)
        self.loaded = Gauge("LoadedModelCount", "TargetModels loaded now (unloading ones included)", registry=r)
        self.loaded_peak = Gauge("LoadedModelCountPeak", "highest LoadedModelCount so far", registry=r)
        self.max_loaded = Gauge("LoadedModelCountLimit", "--max-loaded (0: no limit)", registry=r)
        self.memory = Gauge("MemoryUsedBytes", "PSS of tritonserver and its Python stubs", registry=r)
        self.memory_budget = Gauge("MemoryBudgetBytes", "--memory-budget (0: no limit)", registry=r)
        self.disk = Gauge("DiskUsedBytes", "bytes of unpacked archives in the disk cache", registry=r)
        self.disk_budget = Gauge("DiskBudgetBytes", "--disk-budget (0: no limit)", registry=r)
        self.hit, self.miss, self.answered = self.calls.hit, self.calls.miss, self.calls.answered
        self._samples: dict[str, deque[float]] = {name: deque(maxlen=KEEP) for name in TIMES}
        self._lock = threading.Lock()

    def time(self, name: str, seconds: float) -> None:
        self.times[name].observe(seconds)
        with self._lock:
            self._samples[name].append(seconds)  # the oldest drops out past KEEP

    def set_loaded(self, count: int) -> None:
        self.loaded.set(count)
        with self._lock:
            if count > self.loaded_peak._value.get():
                self.loaded_peak.set(count)

    def prometheus(self) -> bytes:
        return generate_latest(self.registry)

    def snapshot(self) -> dict[str, Any]:
        """Every metric as plain numbers: timings as count, sum and percentiles of recent samples."""
        out: dict[str, Any] = {}
        with self._lock:
            for name, samples in self._samples.items():
                out[name] = summary(samples, *_count_and_sum(self.times[name]))
        hits, misses = self.hit.value, self.miss.value
        out["ModelCacheHit"] = {"hits": hits, "misses": misses,
                                "rate": hits / (hits + misses) if hits + misses else None}
        out["Invocations"] = {status: tally.value for status, tally in self.answered.items()}
        out["ModelLoads"] = {"cold": _count(self.loads, "false"), "reload": _count(self.loads, "true")}
        out["ModelUnloads"] = {s.labels["reason"]: int(s.value) for s in _samples(self.unloads, "_total")}
        for name, metric in (("ModelLoadFailures", self.load_failures), ("ModelDownloads", self.downloads),
                             ("ModelDiskEvictions", self.disk_evictions),
                             ("TritonRestarts", self.restarts), ("TritonLookupRetries", self.lookup_retries),
                             ("TritonLookupMisses", self.lookup_misses), ("StepNameCollisions", self.collisions),
                             ("ModelNotReady", self.not_ready), ("InvocationTimeouts", self.timeouts),
                             ("TritonHopResends", self.resends)):
            out[name] = int(metric._value.get())
        for name, gauge in (("LoadedModelCount", self.loaded), ("LoadedModelCountPeak", self.loaded_peak),
                            ("LoadedModelCountLimit", self.max_loaded), ("MemoryUsedBytes", self.memory),
                            ("MemoryBudgetBytes", self.memory_budget), ("DiskUsedBytes", self.disk),
                            ("DiskBudgetBytes", self.disk_budget)):
            out[name] = int(gauge._value.get())
        return out


def _count_and_sum(timing: Histogram | Timing) -> tuple[float, float]:
    if isinstance(timing, Timing):
        return timing.count, timing.sum
    return (sum(s.value for s in _samples(timing, "_count")), sum(s.value for s in _samples(timing, "_sum")))


def summary(samples: Iterable[float], count: float, total: float) -> dict[str, Any]:
    ordered = sorted(samples)

    def pct(q: float) -> float | None:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else None

    return {"count": int(count), "sum_s": total, "p50_s": pct(0.5), "p90_s": pct(0.9), "p99_s": pct(0.99),
            "max_s": ordered[-1] if ordered else None}


def _samples(metric: Any, suffix: str) -> list[Any]:
    return [s for m in metric.collect() for s in m.samples if s.name.endswith(suffix)]


def _count(counter: Counter, label: str) -> int:
    return int(sum(s.value for s in _samples(counter, "_total") if label in s.labels.values()))


# What a run on the local endpoint reports besides its answers: each count is something a production endpoint
# does differently (a crash it would not restart from, a retry it would not make, step names it would share)
COUNTS = {"restarts": "TritonRestarts", "lookup_retries": "TritonLookupRetries",
          "lookup_misses": "TritonLookupMisses", "collisions": "StepNameCollisions",
          "not_ready": "ModelNotReady", "timeouts": "InvocationTimeouts", "resends": "TritonHopResends"}
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
