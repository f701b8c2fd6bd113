"""What to change, from the figures: each finding names the figure it comes from; no figure, no advice."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from conch.perf.profile.figures import ModelFigures

QUEUE_SHARE = 0.5  # queue time at or past this share of a step's time is worth a finding
MOVE_SHARE = 0.2  # a Python step's compute input + output at or past this share of its time
OVERHEAD_SHARE = 0.2  # the ensemble scheduler's time at or past this share of end to end
CRITICAL_SHARE = 0.5  # a step at or past this share of end to end
MIN_MS = 0.5  # below this, a figure is noise on any machine


@dataclass(frozen=True)
class Finding:
    step: str | None  # None: the ensemble as a whole
    figure: str  # the figure, as measured
    advice: str

    def text(self) -> str:
        return f"{self.step + ': ' if self.step else ''}{self.figure}: {self.advice}"

    def to_json(self) -> dict[str, Any]:
        return {"step": self.step, "figure": self.figure, "advice": self.advice}


@dataclass(frozen=True)
class StepConfig:
    """The config facts findings need, read from the server (``GET /v2/models/<step>/config``)."""

    backend: str
    instances: int
    max_batch_size: int
    dynamic_batching: bool
    max_queue_delay_us: int

    @staticmethod
    def of(config: Mapping[str, Any]) -> StepConfig:
        groups = config.get("instance_group") or []
        instances = sum(int(g.get("count", 1)) for g in groups) or 1
        dynamic = config.get("dynamic_batching")
        backend = str(config.get("backend") or config.get("platform") or "?")
        delay = int((dynamic or {}).get("max_queue_delay_microseconds", 0) or 0)
        return StepConfig(backend, instances, int(config.get("max_batch_size", 0) or 0), dynamic is not None, delay)

    def to_json(self) -> dict[str, Any]:
        return {"backend": self.backend, "instances": self.instances, "max_batch_size": self.max_batch_size,
                "dynamic_batching": self.dynamic_batching, "max_queue_delay_us": self.max_queue_delay_us}


def step_findings(f: ModelFigures, config: StepConfig, *, concurrency: int, share: float, critical: bool,
                  slack_ms: float) -> list[Finding]:
    """Findings for one step from its figures and its config."""
    found: list[Finding] = []
    if f.failures:
        found.append(Finding(f.name, f"{f.failures} of {f.requests + f.failures} requests failed",
                             "see the server log; the other figures count successful requests only"))
    if f.queue_share >= QUEUE_SHARE and f.queue_ms >= MIN_MS:
        fix = f"add an instance (it has {config.instances})"
        if config.max_batch_size and not config.dynamic_batching:
            fix += " or enable dynamic batching"
        if concurrency == 1:  # one request in flight never waits for an instance
            fix = ("with one request in flight nothing waits for an instance: the server's threads waited for a "
                   "core (a busy machine); measure again on a quiet one before changing the config")
        found.append(Finding(f.name, f"queue time {f.queue_share:.0%} of this step's ({f.queue_ms:.1f} ms of "
                             f"{f.work_ms:.1f} ms)", fix))
    if config.dynamic_batching and concurrency > 1 and f.executions and f.requests_per_execution < 1.1:
        found.append(Finding(f.name, f"batch size achieved {f.requests_per_execution:.2f} requests per execution "
                             f"({f.batch_size:.1f} rows) with dynamic batching on, at concurrency {concurrency}",
                             f"the delay ({config.max_queue_delay_us} us) is too short for this load to form batches; "
                             "raise max_queue_delay_microseconds, or turn dynamic batching off"))
    moved = f.compute_input_ms + f.compute_output_ms
    if config.backend == "python" and f.work_ms and moved >= MIN_MS and moved / f.work_ms >= MOVE_SHARE:
        found.append(Finding(f.name, f"compute input + output {moved:.1f} ms ({moved / f.work_ms:.0%} of this "
                             "step's)", "the Python step spends this serialising tensors through shared memory; "
                             "send fewer or smaller tensors, or merge it with its neighbour"))
    if critical and share >= CRITICAL_SHARE:
        found.append(Finding(f.name, f"{share:.0%} of end to end, on the critical path",
                             "the first place where a faster step shortens every request"))
    if not critical and slack_ms >= MIN_MS:
        found.append(Finding(f.name, f"slack {slack_ms:.1f} ms (a parallel branch is longer)",
                             "making this step faster does not shorten the request until it is the longest branch"))
    return found


def ensemble_findings(name: str, e2e_ms: float, overhead_ms: float, ensemble_queue_ms: float) -> list[Finding]:
    found: list[Finding] = []
    if e2e_ms and overhead_ms >= MIN_MS and overhead_ms / e2e_ms >= OVERHEAD_SHARE:
        found.append(Finding(None, f"the ensemble scheduler adds {overhead_ms:.1f} ms ({overhead_ms / e2e_ms:.0%} "
                             "of end to end) beyond the critical path",
                             "time between steps (handing tensors over, scheduling); fewer, larger steps spend less"))
    if e2e_ms and ensemble_queue_ms >= MIN_MS and ensemble_queue_ms / e2e_ms >= OVERHEAD_SHARE:
        found.append(Finding(None, f"requests wait {ensemble_queue_ms:.1f} ms in the ensemble's own queue",
                             "the server takes requests slower than they arrive"))
    return found
