"""A capacity plan: for each instance type, how many instances a fleet of ensembles needs behind one MME to
meet a cold-start (cache miss) rate, a p99 and a utilisation target, what that costs per month, and what one
endpoint per ensemble would cost instead."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from conch.errors import BenchError
from conch.plan.instance_data import InstanceType
from conch.plan.simulate import SimResult, simulate, zipf_trace, zipf_weights

MAX_INSTANCES = 4096


@dataclass(frozen=True)
class Profile:
    """What one ensemble costs an instance: host memory (server share + Python stubs), GPU memory, load time."""

    name: str
    memory_bytes: int
    load_s: float
    gpu_memory_bytes: int | None = None  # None: not measured (no GPU where the probe ran)
    base_memory_bytes: int = 0  # the serving container before any model is loaded

    @classmethod
    def from_probe(cls, raw: dict[str, Any]) -> Profile:
        """From what ``conch bench --probe`` measured (its JSON)."""
        return cls(raw["ensemble"], int(raw["memory_per_copy_bytes"]), float(raw["load_s_mean"]),
                   raw.get("gpu_memory_per_copy_bytes"), int(raw.get("base_memory_bytes", 0)))

    @classmethod
    def read(cls, path: Path) -> Profile:
        try:
            return cls.from_probe(json.loads(path.read_text()))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise BenchError(f"{path}: not a probe JSON written by `conch bench --probe` ({exc})") from None


@dataclass(frozen=True)
class Traffic:
    rps: float  # requests per second over the whole fleet
    zipf: float = 1.0
    service_ms: float = 50.0  # warm latency of one request (p50)
    service_p99_ms: float | None = None  # warm p99; default 3x the p50
    instance_rps: float | None = None  # what one instance sustains without failures (from a bench)
    bench_cpus: int | None = None  # CPUs of the machine the bench ran on: CPU instance types scale by vCPUs

    def rps_of(self, itype: InstanceType) -> float | None:
        """Sustained requests/s of one ``itype`` instance: the bench's figure, scaled by vCPUs for CPU types
        (a GPU type's throughput is the GPU's, which a CPU bench cannot tell: taken as measured)."""
        if self.instance_rps is None:
            return None
        if itype.gpu is None and self.bench_cpus:
            return self.instance_rps * itype.vcpu / self.bench_cpus
        return self.instance_rps

    @classmethod
    def from_bench(cls, path: Path, rps: float, zipf: float) -> Traffic:
        try:
            raw = json.loads(path.read_text())
            warm = raw["warm"]
            # what a stage sustained with no failed request among those it started (a pile-up of cold
            # first calls failing in the warm-up stage says nothing about throughput)
            clean = [s["throughput_rps"] for s in raw["per_stage"] if s["failures"] == 0]
            return cls(rps, zipf, float(warm["p50_ms"]), warm.get("p99_ms"), max(clean) if clean else None,
                       raw.get("machine", {}).get("cpus"))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise BenchError(f"{path}: not a bench JSON written by `conch bench` ({exc})") from None


@dataclass(frozen=True)
class Targets:
    miss_rate: float = 0.01  # at most this share of requests waits for a model load
    p99_ms: float | None = None
    utilisation: float = 0.7  # of one instance's sustained throughput


@dataclass
class Row:
    instance_type: str
    price_per_hour: float
    models_per_instance: int
    instances: int | None
    hit_rate: float | None
    mean_wait_ms: float | None  # ModelLoadingWaitTime averaged over all requests
    wait_per_miss_s: float | None
    p99_ms: float | None
    monthly: float | None
    single_endpoints_monthly: float | None
    limited_by: str
    curve: list[tuple[int, float]] = field(default_factory=list)  # (instances, hit rate)


def models_per_instance(profiles: Sequence[Profile], itype: InstanceType, threshold: float) -> int:
    """Copies of the average ensemble that fit within ``threshold`` of the instance's memory (and GPU memory)."""
    base = max(p.base_memory_bytes for p in profiles)
    host = sum(p.memory_bytes for p in profiles) / len(profiles)
    fit = math.floor((threshold * itype.memory_bytes - base) / host) if host else 0
    if itype.gpu_memory_bytes:
        gpu = sum(p.gpu_memory_bytes or p.memory_bytes for p in profiles) / len(profiles)
        fit = min(fit, math.floor(threshold * itype.gpu_memory_bytes / gpu))
    return max(fit, 0)


def p99_estimate(miss_rate: float, wait_per_miss_s: float, traffic: Traffic) -> float:
    """p99 of a mixture: warm requests, plus misses that wait a load first."""
    warm_p99 = traffic.service_p99_ms or 3 * traffic.service_ms
    if miss_rate >= 0.01:
        return wait_per_miss_s * 1000 + traffic.service_ms
    return warm_p99


def plan_type(profiles: Sequence[Profile], count: int, traffic: Traffic, targets: Targets, itype: InstanceType,
              *, threshold: float = 0.9, trace_length: int = 20000, seed: int = 0) -> Row:
    """Simulate growing fleets of ``itype`` until the targets are met."""
    fit = models_per_instance(profiles, itype, threshold)
    row = Row(itype.name, itype.price_per_hour, fit, None, None, None, None, None, None, None, "")
    if fit < 1:
        row.limited_by = "one ensemble does not fit"
        return row
    fleet = [profiles[i % len(profiles)] for i in range(count)]
    sizes = [1] * count  # equal slots: models_per_instance already turned memory into a count
    load_s = [p.load_s for p in fleet]
    trace = zipf_trace(count, trace_length, traffic.zipf, seed)
    warmup = trace_length // 5
    per_instance = traffic.rps_of(itype)
    need_rps = math.ceil(traffic.rps / (targets.utilisation * per_instance)) if per_instance else 1

    def run(n: int) -> SimResult:
        result = simulate(trace, sizes, load_s, n, fit, warmup=warmup)
        row.curve.append((n, result.hit_rate))
        return result

    def good(result: SimResult) -> bool:
        wait = result.wait_s / max(result.loads, 1)
        p99_ok = targets.p99_ms is None or p99_estimate(result.miss_rate, wait, traffic) <= targets.p99_ms
        return result.miss_rate <= targets.miss_rate and p99_ok

    low, high = max(need_rps, 1), max(need_rps, 1)
    for fewer in (1, 2, 4, 8, 16, 32):  # the curve below what throughput needs, for the figure
        if fewer < low:
            run(fewer)
    result = run(high)
    while not good(result) and high < MAX_INSTANCES:
        if high * fit >= 2 * count:  # every model fits twice over: more instances cannot lower misses
            break
        low, high = high + 1, min(high * 2, MAX_INSTANCES)
        result = run(high)
    if not good(result):
        row.limited_by = "targets not reachable (see the hit-rate curve)"
        high_result = result
    else:
        while low < high:  # smallest count that meets the targets, given that more never hurts
            middle = (low + high) // 2
            if good(run(middle)):
                high = middle
            else:
                low = middle + 1
        high_result = simulate(trace, sizes, load_s, high, fit, warmup=warmup)
        row.limited_by = "throughput" if high == need_rps and need_rps > 1 else "cold starts / p99"
    row.curve.sort()
    wait_per_miss = high_result.wait_s / max(high_result.loads, 1)
    row.instances, row.hit_rate = high, high_result.hit_rate
    row.mean_wait_ms = high_result.mean_wait_s * 1000
    row.wait_per_miss_s = wait_per_miss
    row.p99_ms = p99_estimate(high_result.miss_rate, wait_per_miss, traffic)
    row.monthly = high * itype.monthly
    row.single_endpoints_monthly = single_endpoints(count, traffic, itype)
    return row


def single_endpoints(count: int, traffic: Traffic, itype: InstanceType) -> float:
    """One endpoint (at least one instance) per ensemble, each sized for its own share of the traffic."""
    shares = zipf_weights(count, traffic.zipf) * traffic.rps
    per = traffic.rps_of(itype) or math.inf
    return float(sum(max(1, math.ceil(s / per)) for s in shares)) * itype.monthly


def plan(profiles: Sequence[Profile], count: int, traffic: Traffic, targets: Targets,
         types: Sequence[InstanceType], **options: Any) -> list[Row]:
    if not profiles:
        raise BenchError("a plan needs at least one ensemble profile (a probe JSON, or --memory-per-model)")
    if count < 1 or traffic.rps <= 0:
        raise BenchError("a plan needs at least one ensemble and a positive request rate")
    _check_ranges(profiles, traffic, targets, options.get("threshold", 0.9))
    return [plan_type(profiles, count, traffic, targets, t, **options) for t in types]


def _check_ranges(profiles: Sequence[Profile], traffic: Traffic, targets: Targets, threshold: float) -> None:
    """Refuse figures the simulation would quietly turn into a plan (a share above 1, a negative time)."""
    shares = {"--utilisation": targets.utilisation, "--threshold": threshold}
    positive = {"--service-ms": traffic.service_ms, "--instance-rps": traffic.instance_rps,
                "--p99-ms": targets.p99_ms}
    wrong = [f"{flag} {value:g} is not in (0, 1]" for flag, value in shares.items() if not 0 < value <= 1]
    if not 0 <= targets.miss_rate <= 1:
        wrong.append(f"--miss-rate {targets.miss_rate:g} is not in [0, 1]")
    wrong += [f"{flag} {value:g} is not positive" for flag, value in positive.items()
              if value is not None and not value > 0]
    if not traffic.zipf >= 0:
        wrong.append(f"--zipf {traffic.zipf:g} is negative (0: uniform)")
    for profile in profiles:
        if not profile.memory_bytes > 0 or not profile.load_s >= 0:
            wrong.append(f"ensemble profile {profile.name!r}: memory {profile.memory_bytes} bytes and load "
                         f"{profile.load_s:g} s (memory must be positive, load time not negative)")
    if wrong:
        raise BenchError("a plan cannot use these figures: " + "; ".join(wrong))


def to_json(rows: Sequence[Row], **context: Any) -> dict[str, Any]:
    return {**context, "rows": [asdict(r) for r in rows]}
