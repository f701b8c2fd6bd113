"""Cut a load run into its stages and summarise each as seed 003 does: users, requests, failures, latency
percentiles, throughput; cold (first-call) against warm latency; the first user count with a failed request."""

from __future__ import annotations

import bisect
import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from conch.endpoint.metrics import lenient
from conch.perf.load.runner import RunResult
from conch.perf.load.stages import stage_index, stage_start


def percentiles(latencies: Sequence[float]) -> dict[str, float | None]:
    if not latencies:
        return {"p50_ms": None, "p90_ms": None, "p99_ms": None, "mean_ms": None}
    p50, p90, p99 = np.percentile(np.asarray(latencies), [50, 90, 99])
    return {"p50_ms": round(float(p50), 2), "p90_ms": round(float(p90), 2), "p99_ms": round(float(p99), 2),
            "mean_ms": round(float(np.mean(latencies)), 2)}


def cold_flags(records: Sequence[Sequence[Any]]) -> list[bool]:
    """A request is cold when it started before the first successful answer of its TargetModel arrived: the
    first call, and the calls that waited for the same load (SageMaker's ModelLoadingWaitTime)."""
    first_answer: dict[int, float] = {}
    for start, ms, ok, target, _ in records:
        if ok:
            end = start + ms / 1000
            first_answer[target] = min(end, first_answer.get(target, end))
    return [start < first_answer.get(target, float("inf")) for start, _, _, target, _ in records]


def users_at(timeline: Sequence[Sequence[float]], when: float) -> int:
    """Running users at wall time ``when`` (the last sample before it)."""
    index = bisect.bisect_right([t for t, _ in timeline], when)
    return int(timeline[index - 1][1]) if index else 0


def summarise(result: RunResult, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    spec = result.spec
    # Every request sent counts once: one that started in the moment between the last stage's end and the
    # users' stop (or before the start, on a remote worker's clock) counts in the stage nearest to it.
    records = sorted(result.records, key=lambda r: r[0])
    cold = cold_flags(records)
    per_stage: list[dict[str, Any]] = []
    by_stage: list[list[int]] = [[] for _ in spec.stages]
    for i, rec in enumerate(records):
        by_stage[_stage_of(spec.stages, rec[0] - result.started) - 1].append(i)
    for index, (stage, members) in enumerate(zip(spec.stages, by_stage, strict=True)):
        seconds = stage.duration - stage_start(spec.stages, index)
        ok = [records[i][1] for i in members if records[i][2]]
        warm = [records[i][1] for i in members if records[i][2] and not cold[i]]
        failures = sum(1 for i in members if not records[i][2])
        per_stage.append({
            "stage": index + 1, "users": stage.users, "seconds": seconds, "requests": len(members),
            "successes": len(ok), "failures": failures, **percentiles(ok),
            "throughput_rps": round(len(ok) / seconds, 2), "cold_requests": sum(1 for i in members if cold[i]),
            "warm_p50_ms": percentiles(warm)["p50_ms"],
        })
    failed = [r for r in records if not r[2]]
    first_failure = None
    if failed:
        start, ms, _, target, error = failed[0]
        seen = start + ms / 1000  # when the client saw it fail: the user count then is what the seed reports
        first_failure = {"users": users_at(result.timeline, seen), "seconds": round(seen - result.started, 2),
                         "stage": _stage_of(spec.stages, seen - result.started),
                         "target": spec.targets[target].name, "error": error}
    cold_ok = [r[1] for r, c in zip(records, cold, strict=True) if c and r[2]]
    warm_ok = [r[1] for r, c in zip(records, cold, strict=True) if not c and r[2]]
    return {
        "target": {"kind": spec.kind, "url": spec.url, "endpoint": spec.endpoint},
        "targets": [t.name for t in spec.targets], "zipf": spec.zipf, "workers": result.workers,
        "stages": [s.to_json() for s in spec.stages], "duration_s": round(result.ended - result.started, 2),
        "requests": len(records), "failures": len(failed),
        "throughput_rps": round(sum(1 for r in records if r[2]) / max(result.ended - result.started, 1e-9), 2),
        "per_stage": per_stage,
        "cold": {"requests": len(cold_ok), **percentiles(cold_ok)},
        "warm": {"requests": len(warm_ok), **percentiles(warm_ok)},
        "first_failure": first_failure,
        "errors": dict(Counter(r[4] for r in failed).most_common(10)),
        "per_target": _per_target(spec.targets, records),
        **(extra or {}),
    }


def _stage_of(stages: Sequence[Any], elapsed: float) -> int:
    """1-based stage at ``elapsed`` seconds; the last one for a request that ended after the run."""
    index = stage_index(stages, elapsed)
    return len(stages) if index is None else index + 1 if elapsed >= 0 else 1


def _per_target(targets: Sequence[Any], records: Sequence[Sequence[Any]]) -> dict[str, dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    for index, target in enumerate(targets):
        mine = [r for r in records if r[3] == index]
        ok = [r[1] for r in mine if r[2]]
        rows[target.name] = {"requests": len(mine), "failures": len(mine) - len(ok),
                             "p50_ms": percentiles(ok)["p50_ms"]}
    return rows


def table(summary: dict[str, Any]) -> str:
    """Seed 003's figures as text: one row per stage, then cold vs warm and the first failure."""
    header = ("stage", "users", "requests", "failures", "p50 ms", "p90 ms", "p99 ms", "req/s", "cold", "warm p50")
    rows = [(s["stage"], s["users"], s["requests"], s["failures"], _ms(s["p50_ms"]), _ms(s["p90_ms"]),
             _ms(s["p99_ms"]), f"{s['throughput_rps']:.1f}", s["cold_requests"], _ms(s["warm_p50_ms"]))
            for s in summary["per_stage"]]
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(str(v).rjust(w) for v, w in zip(row, widths, strict=True)) for row in [header, *rows]]
    for name, row in summary["per_target"].items():
        lines.append(f"  {name}: {row['requests']} requests, {row['failures']} failed, p50 {_ms(row['p50_ms'])} ms")
    cold, warm = summary["cold"], summary["warm"]
    lines.append(f"cold (first calls): {cold['requests']} requests, p50 {_ms(cold['p50_ms'])} ms; "
                 f"warm: {warm['requests']} requests, p50 {_ms(warm['p50_ms'])} ms, p99 {_ms(warm['p99_ms'])} ms")
    first = summary["first_failure"]
    lines.append("no failed request" if first is None else
                 f"first failed request at {first['users']} users (stage {first['stage']}, {first['seconds']} s, "
                 f"{first['target']}): {first['error']}")
    for name, why in (summary.get("not_applicable") or {}).items():
        lines.append(f"JSON bodies not applicable to {name}, sent binary+json: {why}")
    counts = summary.get("endpoint")
    components = (summary.get("mme_metrics_after") or {}).get("components")
    if components:  # a local endpoint with inference components: its own counts per component
        lines += [f"component {name}: {int(c.get('Invocations', 0))} invocations, "
                  f"{int(c.get('NoCapacityInvocationFailures', 0))} NoCapacityInvocationFailures, "
                  f"{int(c.get('CopyCount', 0))} copies" for name, c in sorted(components.items())]
    elif counts:
        lines.append(f"endpoint (--step-names {counts['step_names']}): {_n(counts['restarts'])} tritonserver restarts, "
                     f"{_n(counts['collisions'])} step name collisions, {_n(counts['lookup_misses'])} 'unknown model' "
                     f"answers (Triton's lookup race), {_n(counts['lookup_retries'])} retried, "
                     f"{_n(counts['not_ready'])} ModelNotReadyException, {_n(counts['timeouts'])} timeouts")
    lines.append(f"{summary['requests']} requests, {summary['failures']} failed, "
                 f"{summary['throughput_rps']:.1f} successful req/s overall")
    return "\n".join(lines)


def problems(summary: dict[str, Any]) -> list[str]:
    """Why a run is not clean: failed requests (errors or wrong answers), none sent, or an endpoint that was
    kinder than production (restarts, lookup retries, step name collisions); [] for a clean run."""
    found = []
    if not summary["requests"]:
        found.append("no request was sent")
    if summary["failures"]:
        found.append(f"{summary['failures']} of {summary['requests']} requests failed")
    found += lenient(summary.get("endpoint") or {})
    return found


def _n(value: int | None) -> str:
    return "?" if value is None else str(value)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def write_json(summary: dict[str, Any], path: Path) -> None:
    from conch.atomic_write import write_bytes_atomic

    write_bytes_atomic(path, (json.dumps(summary, indent=1) + "\n").encode())
