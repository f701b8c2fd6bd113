"""One profile: per-step figures, the critical path, the scheduler's share and the findings, as a table for
people and as JSON with every figure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from conch.perf.profile.dag import CriticalPath, Dag, critical_path
from conch.perf.profile.figures import ModelFigures, Snapshot, difference
from conch.perf.profile.findings import Finding, StepConfig, ensemble_findings, step_findings
from conch.perf.profile.trace import TracedRequest

Quantiles = Mapping[str, Mapping[str, float]]  # category -> {"p50": ms, "p99": ms}
PERCENTILES_NOTE = ("Triton's statistics extension gives cumulative count and time per category, so per step "
                    "only means; p50/p99 come from its summary metrics (--metrics-config summary_latencies=true) "
                    "when the metrics port is reachable, over the summary's sliding time window, not the run alone")


@dataclass(frozen=True)
class RunInfo:
    """How the figures were made: where, with what and how hard."""

    server: str  # "local triton", "local MME", or the URL
    payload: str
    requests: int
    concurrency: int
    seconds: float
    client_ms: Mapping[str, float]  # mean, p50, p99 as the client saw them
    errors: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"server": self.server, "payload": self.payload, "requests": self.requests,
                "concurrency": self.concurrency, "seconds": round(self.seconds, 3),
                "throughput_per_s": round(self.requests / self.seconds, 2) if self.seconds else 0.0,
                "client_ms": {k: round(v, 3) for k, v in self.client_ms.items()}, "errors": self.errors}


@dataclass(frozen=True)
class StepProfile:
    index: int
    figures: ModelFigures
    config: StepConfig
    share: float  # of the ensemble's end-to-end time
    critical: bool
    slack_ms: float
    start_ms: float  # at the earliest, from the ensemble's start, with mean times
    quantiles: Quantiles
    findings: tuple[Finding, ...]

    @property
    def model(self) -> str:
        return self.figures.name

    def to_json(self) -> dict[str, Any]:
        return {**self.figures.to_json(), **self.config.to_json(), "share": round(self.share, 4),
                "critical": self.critical, "slack_ms": round(self.slack_ms, 3), "start_ms": round(self.start_ms, 3),
                "percentiles_ms": {k: {q: round(v, 3) for q, v in qs.items()} for k, qs in self.quantiles.items()},
                "findings": [f.to_json() for f in self.findings]}


@dataclass(frozen=True)
class Profile:
    ensemble: str
    run: RunInfo
    figures: ModelFigures  # the ensemble's own: success time is end to end at the server
    steps: tuple[StepProfile, ...]
    path: CriticalPath
    quantiles: Quantiles
    findings: tuple[Finding, ...]
    config: Mapping[str, Any] = field(default_factory=dict)  # the ensemble's config as the server gave it
    traced: TracedRequest | None = None  # one request traced through the steps, where the server traces

    @property
    def e2e_ms(self) -> float:
        return self.figures.request_ms

    @property
    def overhead_ms(self) -> float:
        """What the ensemble adds beyond its critical path: its own queue, handing tensors between steps."""
        return self.e2e_ms - self.path.length_ms

    @property
    def chain(self) -> tuple[str, ...]:
        return tuple(self.steps[i].model for i in self.path.chain)

    def all_findings(self) -> list[Finding]:
        return [*self.findings, *(f for s in self.steps for f in s.findings)]

    def to_json(self) -> dict[str, Any]:
        return {"ensemble": self.ensemble, "run": self.run.to_json(), "end_to_end_ms": round(self.e2e_ms, 3),
                "ensemble_figures": self.figures.to_json(),
                "percentiles_ms": {k: {q: round(v, 3) for q, v in qs.items()} for k, qs in self.quantiles.items()},
                "critical_path": {"steps": list(self.chain), "length_ms": round(self.path.length_ms, 3)},
                "scheduler_overhead_ms": round(self.overhead_ms, 3),
                "scheduler_share": round(self.overhead_ms / self.e2e_ms, 4) if self.e2e_ms else 0.0,
                "steps": [s.to_json() for s in self.steps],
                "findings": [f.to_json() | {"text": f.text()} for f in self.all_findings()],
                "percentiles_note": PERCENTILES_NOTE,
                "traced_request": None if self.traced is None else self.traced.to_json()}

    def table(self) -> str:
        """The report for people: run, per-step table, critical path, findings."""
        r = self.run
        lines = [f"ensemble {self.ensemble} on {r.server}: {r.requests} requests of {r.payload} at concurrency "
                 f"{r.concurrency}, {r.seconds:.1f} s ({r.requests / r.seconds if r.seconds else 0:.1f}/s); client "
                 f"mean {r.client_ms.get('mean', 0):.1f} ms, p50 {r.client_ms.get('p50', 0):.1f}, "
                 f"p99 {r.client_ms.get('p99', 0):.1f}" + (f"; {r.errors} errors" if r.errors else ""), ""]
        header = ("step", "reqs", "execs", "req/ex", "queue", "c.in", "infer", "c.out", "total", "p50", "p99",
                  "share", "slack", "")
        rows = [header]
        for s in self.steps:
            f = s.figures
            q = s.quantiles.get("request", {})
            rows.append((f.name, str(f.requests), str(f.executions), f"{f.requests_per_execution:.1f}",
                         f"{f.queue_ms:.2f}",
                         f"{f.compute_input_ms:.2f}", f"{f.compute_infer_ms:.2f}", f"{f.compute_output_ms:.2f}",
                         f"{f.work_ms:.2f}", _ms(q.get("p50")), _ms(q.get("p99")), f"{s.share:.0%}",
                         f"{s.slack_ms:.1f}", "critical" if s.critical else ""))
        e, q = self.figures, self.quantiles.get("request", {})
        rows.append((f"{self.ensemble} (end to end)", str(e.requests), str(e.executions),
                     f"{e.requests_per_execution:.1f}",
                     f"{e.queue_ms:.2f}", "", "", "", f"{e.request_ms:.2f}", _ms(q.get("p50")), _ms(q.get("p99")),
                     "100%", "", ""))
        widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
        for row in rows:
            lines.append("  ".join(v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in
                                   enumerate(zip(row, widths, strict=True))).rstrip())
        lines.append("(req/ex: requests per execution, what batching merged; milliseconds per request, means: queue, "
                     "compute input, infer, output and their total; p50/p99 of the request time from Triton's summary "
                     "metrics where they answer; share of end to end)")
        share = self.overhead_ms / self.e2e_ms if self.e2e_ms else 0.0
        lines += ["", f"critical path: {' -> '.join(self.chain)} = {self.path.length_ms:.1f} ms of "
                  f"{self.e2e_ms:.1f} ms end to end; the ensemble scheduler adds {self.overhead_ms:.1f} ms "
                  f"({share:.0%})"]
        if self.overhead_ms < 0:
            lines.append("  (below zero: Triton stamps a step's compute output as ended after the ensemble has already "
                         "handed its tensors on, so the steps' figures overlap by this much)")
        found = self.all_findings()
        lines += ["", "findings:" if found else "findings: none (no figure past a threshold)"]
        lines += [f"  - {f.text()}" for f in found]
        return "\n".join(lines)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def assemble(dag: Dag, before: Snapshot, after: Snapshot, configs: Mapping[str, Mapping[str, Any]], run: RunInfo,
             quantiles: Mapping[str, Quantiles] | None = None) -> Profile:
    """A profile from two statistics snapshots around a run, the step configs (``configs``: each step's model
    config, and the ensemble's, by model name) and how the run went."""
    quantiles = quantiles or {}
    ensemble = difference(dag.ensemble, before.get(dag.ensemble), after.get(dag.ensemble, {}))
    figures = [difference(s.model, before.get(s.model), after.get(s.model, {})) for s in dag.steps]
    durations = tuple(f.work_ms for f in figures)
    path = critical_path(dag, durations)
    e2e = ensemble.request_ms
    steps = []
    for i, f in enumerate(figures):
        config = StepConfig.of(configs.get(f.name, {}))
        critical = i in path.chain
        share = f.work_ms / e2e if e2e else 0.0
        found = step_findings(f, config, concurrency=run.concurrency, share=share, critical=critical,
                              slack_ms=path.slack_ms[i])
        steps.append(StepProfile(i, f, config, share, critical, path.slack_ms[i], path.start_ms(i, durations),
                                 quantiles.get(f.name, {}), tuple(found)))
    overall = ensemble_findings(dag.ensemble, e2e, e2e - path.length_ms, ensemble.queue_ms)
    return Profile(dag.ensemble, run, ensemble, tuple(steps), path, quantiles.get(dag.ensemble, {}), tuple(overall),
                   configs.get(dag.ensemble, {}))
