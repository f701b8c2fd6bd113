"""What `conch tune` may change, per step: instance count, dynamic batching (on or off, preferred sizes, max
queue delay) and the backend's own thread parameters; the settings of a trial, and how they are written into
a step's model config (Triton's config JSON, as ``GET /v2/models/<step>/config`` gives it)."""

from __future__ import annotations

import copy
import itertools
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from conch.errors import BenchError
from conch.perf.profile.findings import StepConfig

# The thread parameters each backend reads from its model config, by the step's declared kind. Triton's
# onnxruntime backend reads intra/inter op thread counts per model (and so does conch's ONNX Runtime stand-in);
# the libtorch backend reads INTRA/INTER_OP_THREAD_COUNT (once per server process in production; per stand-in
# process here, docs/fidelity.md). A Python step's own parallelism is its instance count.
THREAD_PARAMETERS: Mapping[str, tuple[str, ...]] = {
    "onnx": ("intra_op_thread_count", "inter_op_thread_count"),
    "pytorch": ("INTRA_OP_THREAD_COUNT", "INTER_OP_THREAD_COUNT"),
}


@dataclass(frozen=True, order=True)
class Knobs:
    """One step's settings in a trial. ``threads``: (parameter, value) pairs, sorted; a parameter left out
    keeps the backend's default."""

    instances: int = 1
    batching: bool = False
    delay_us: int = 0
    preferred: tuple[int, ...] = ()
    threads: tuple[tuple[str, int], ...] = ()

    def thread(self, key: str) -> int | None:
        return dict(self.threads).get(key)

    def with_thread(self, key: str, value: int | None) -> Knobs:
        found = {k: v for k, v in self.threads if k != key}
        if value is not None:
            found[key] = value
        return replace(self, threads=tuple(sorted(found.items())))

    def cpu_slots(self) -> int:
        """Instances times the threads each may keep busy (1 where the backend's default is left)."""
        per = max((v for _, v in self.threads), default=1)
        return self.instances * per

    def text(self) -> str:
        parts = [f"{self.instances} instance{'s' if self.instances != 1 else ''}"]
        if self.batching:
            sizes = f", preferred {list(self.preferred)}" if self.preferred else ""
            parts.append(f"batching (delay {self.delay_us} us{sizes})")
        else:
            parts.append("no batching")
        parts += [f"{k}={v}" for k, v in self.threads]
        return ", ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {"instances": self.instances, "dynamic_batching": self.batching,
                "max_queue_delay_us": self.delay_us if self.batching else None,
                "preferred_batch_size": list(self.preferred) if self.batching else None,
                "threads": dict(self.threads)}


@dataclass(frozen=True)
class StepSpace:
    """One step as the tune sees it: its name on the server, its declared name and kind, what it may change."""

    ensemble: str  # the ensemble's name on the server (its TargetModel)
    model: str  # the step's model name on the server
    step: str  # the declared step name (what the declaration says)
    kind: str  # the declared backend kind (python, onnx, pytorch, ...)
    max_batch_size: int

    @property
    def thread_keys(self) -> tuple[str, ...]:
        return THREAD_PARAMETERS.get(self.kind, ())

    @property
    def batches(self) -> bool:
        return self.max_batch_size > 0


@dataclass(frozen=True)
class Levels:
    """The values each knob may take: the space both the guided search and the grid walk."""

    max_instances: int = 0  # 0: as many as this machine has cores, at least 2
    delays_us: tuple[int, ...] = (0, 2000)
    preferred: tuple[tuple[int, ...], ...] = ((),)
    threads: tuple[int, ...] = ()  # () : 1 up to the cores
    cpu_budget: int = 0  # instances x threads over every step of every ensemble; 0: 2 x cores, at least 4
    cpu_cores: int = 0  # the cores the steps share (instances x threads per instance should fit); 0: this machine's

    def instances(self) -> tuple[int, ...]:
        return tuple(range(1, (self.max_instances or max(2, self.cores())) + 1))

    def thread_values(self) -> tuple[int, ...]:
        return self.threads or tuple(range(1, max(2, self.cores()) + 1))

    def cores(self) -> int:
        """The cores a step's instances share: what a backend's default thread count takes, and what instances
        times threads per instance should fit."""
        return self.cpu_cores or os.cpu_count() or 1

    def budget(self) -> int:
        return self.cpu_budget or max(4, 2 * self.cores())

    def __post_init__(self) -> None:
        if (self.max_instances < 0 or self.cpu_cores < 0 or any(d < 0 for d in self.delays_us)
                or any(t < 1 for t in self.threads)):
            raise BenchError("tune levels: instances, cores, queue delays and thread counts must be positive")
        if any(size < 1 for sizes in self.preferred for size in sizes):
            raise BenchError("tune levels: preferred batch sizes must be 1 or more")
        if not self.delays_us:
            raise BenchError("tune levels: give at least one max queue delay (0 batches what is queued)")

    def to_json(self) -> dict[str, Any]:
        return {"instances": list(self.instances()), "delays_us": list(self.delays_us),
                "preferred": [list(p) for p in self.preferred], "threads": list(self.thread_values()),
                "cpu_budget": self.budget(), "cores": self.cores()}


@dataclass(frozen=True)
class Settings:
    """Every tuned step's knobs, by (ensemble, step model)."""

    knobs: Mapping[tuple[str, str], Knobs] = field(default_factory=dict)

    def key(self) -> tuple[tuple[tuple[str, str], Knobs], ...]:
        return tuple(sorted(self.knobs.items()))

    def __hash__(self) -> int:
        return hash(self.key())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Settings) and self.key() == other.key()

    def of(self, step: StepSpace) -> Knobs:
        return self.knobs[(step.ensemble, step.model)]

    def with_step(self, step: StepSpace, knobs: Knobs) -> Settings:
        return Settings({**self.knobs, (step.ensemble, step.model): knobs})

    def cpu_slots(self) -> int:
        return sum(k.cpu_slots() for k in self.knobs.values())

    def to_json(self) -> list[dict[str, Any]]:
        return [{"ensemble": e, "model": m, **k.to_json()} for (e, m), k in sorted(self.knobs.items())]


def knobs_of(config: Mapping[str, Any], step: StepSpace) -> Knobs:
    """The knobs a step's config has now (the declaration's settings, as the server loaded them)."""
    now, params = StepConfig.of(config), config.get("parameters") or {}
    threads = tuple(sorted((k, int(params[k]["string_value"])) for k in step.thread_keys
                           if k in params and str(params[k].get("string_value", "")).isdigit()))
    preferred = (config.get("dynamic_batching") or {}).get("preferred_batch_size") or ()
    return Knobs(now.instances, now.dynamic_batching, now.max_queue_delay_us, tuple(int(s) for s in preferred), threads)


def apply_knobs(config: Mapping[str, Any], step: StepSpace, knobs: Knobs) -> dict[str, Any]:
    """The step's config JSON with these knobs: its instance groups become one group of the first group's kind
    (Triton's instance names are derived again), batching is set or removed, thread parameters set or removed;
    everything else is kept."""
    new = copy.deepcopy(dict(config))
    groups = new.get("instance_group") or [{"kind": "KIND_CPU"}]
    kind = groups[0].get("kind", "KIND_CPU")
    new["instance_group"] = [{"kind": kind, "count": knobs.instances, **({"gpus": groups[0]["gpus"]}
                                                                         if groups[0].get("gpus") else {})}]
    if knobs.batching:
        if not step.batches:
            raise BenchError(f"step {step.step!r} of {step.ensemble}: dynamic batching needs max_batch_size > 0")
        new["dynamic_batching"] = {"preferred_batch_size": list(knobs.preferred),
                                   "max_queue_delay_microseconds": knobs.delay_us}
    else:
        new.pop("dynamic_batching", None)
    params = dict(new.get("parameters") or {})
    for key in step.thread_keys:
        value = knobs.thread(key)
        if value is None:
            params.pop(key, None)
        else:
            params[key] = {"string_value": str(value)}
    new["parameters"] = params
    return new


def step_choices(step: StepSpace, levels: Levels) -> list[Knobs]:
    """Every setting of one step the levels allow (the grid's factor for this step)."""
    batching: list[tuple[bool, int, tuple[int, ...]]] = [(False, 0, ())]
    if step.batches:
        batching += [(True, d, p) for d in levels.delays_us for p in levels.preferred]
    # threads: the first parameter (intra op) over the levels; the others stay at the backend's default
    threads: list[tuple[tuple[str, int], ...]] = [()]
    if step.thread_keys:
        threads = [((step.thread_keys[0], t),) for t in levels.thread_values()]
    return [Knobs(i, b, d, p, t) for i in levels.instances() for (b, d, p) in batching for t in threads]


def grid(steps: Sequence[StepSpace], levels: Levels, fixed: Settings | None = None) -> Iterator[Settings]:
    """The exhaustive grid over the same space the guided search walks, inside the CPU budget; the steps not
    tuned keep ``fixed``'s knobs. The last step changes fastest, so consecutive trials reload few steps."""
    budget = levels.budget()
    for combo in itertools.product(*(step_choices(s, levels) for s in steps)):
        settings = Settings({**(fixed.knobs if fixed else {}),
                             **{(s.ensemble, s.model): k for s, k in zip(steps, combo, strict=True)}})
        if settings.cpu_slots() <= budget:
            yield settings


def grid_size(steps: Sequence[StepSpace], levels: Levels, fixed: Settings | None = None) -> int:
    return sum(1 for _ in grid(steps, levels, fixed))
