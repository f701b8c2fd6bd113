"""The ensemble's DAG as Triton runs it (its config's ``ensemble_scheduling`` steps, wired by tensor name),
and the critical path through it: the chain of steps whose times add up to the longest route from the
ensemble's inputs to its outputs. Steps on parallel branches are not added up."""

from __future__ import annotations

import graphlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from conch.errors import ServeError


@dataclass(frozen=True)
class DagStep:
    model: str
    inputs: tuple[str, ...]  # ensemble-level tensor names this step reads
    outputs: tuple[str, ...]  # ... and writes


@dataclass(frozen=True)
class Dag:
    ensemble: str
    steps: tuple[DagStep, ...]

    def predecessors(self) -> dict[int, tuple[int, ...]]:
        """For each step (by index), the steps that write a tensor it reads."""
        writer = {t: i for i, s in enumerate(self.steps) for t in s.outputs}
        return {i: tuple(sorted({writer[t] for t in s.inputs if t in writer})) for i, s in enumerate(self.steps)}

    def order(self) -> list[int]:
        """Step indices in an order where every step comes after the steps it reads from (graphlib's)."""
        try:
            return list(graphlib.TopologicalSorter(self.predecessors()).static_order())
        except graphlib.CycleError:
            raise ServeError(f"ensemble {self.ensemble!r}: its steps form a cycle; Triton would refuse it") from None


def dag_of(config: Mapping[str, Any], *, alone: bool = False) -> Dag:
    """The DAG of an ensemble's model config as JSON (``GET /v2/models/<name>/config``); ``alone``: the model of a
    single-model archive, served without an ensemble, is a DAG of one step, itself."""
    name = str(config.get("name", "?"))
    scheduling = config.get("ensemble_scheduling") or {}
    steps = scheduling.get("step") or []
    if not steps and alone:
        return Dag(name, (DagStep(name, tuple(sorted(str(t["name"]) for t in config.get("input", []))),
                                  tuple(sorted(str(t["name"]) for t in config.get("output", [])))),))
    if not steps:
        raise ServeError(f"model {name!r} is not an ensemble (its config has no ensemble_scheduling steps); "
                         "profile the ensemble, not one of its steps")
    return Dag(name, tuple(DagStep(str(s["model_name"]), tuple(sorted(s.get("input_map", {}).values())),
                                   tuple(sorted(s.get("output_map", {}).values()))) for s in steps))


@dataclass(frozen=True)
class CriticalPath:
    chain: tuple[int, ...]  # step indices, first to last
    length_ms: float
    finish_ms: tuple[float, ...]  # per step: when it ends at the earliest, from the ensemble's start
    slack_ms: tuple[float, ...]  # per step: how much longer it could take without lengthening the path

    def start_ms(self, step: int, durations: tuple[float, ...]) -> float:
        return self.finish_ms[step] - durations[step]


def critical_path(dag: Dag, durations: tuple[float, ...]) -> CriticalPath:
    """Longest route through the DAG with each step weighted by its duration (e.g. mean request time)."""
    before, order = dag.predecessors(), dag.order()
    finish = [0.0] * len(dag.steps)
    came_from: list[int | None] = [None] * len(dag.steps)
    for i in order:
        start = 0.0
        for p in before[i]:
            if finish[p] > start:
                start, came_from[i] = finish[p], p
        finish[i] = start + durations[i]
    length = max(finish, default=0.0)
    # latest finish without lengthening the path: backwards from the steps nothing reads
    after: dict[int, list[int]] = {i: [] for i in range(len(dag.steps))}
    for i, ps in before.items():
        for p in ps:
            after[p].append(i)
    latest = [length] * len(dag.steps)
    for i in reversed(order):
        if after[i]:
            latest[i] = min(latest[j] - durations[j] for j in after[i])
    slack = tuple(max(0.0, latest[i] - finish[i]) for i in range(len(dag.steps)))
    last: int | None = max(range(len(dag.steps)), key=lambda i: finish[i]) if dag.steps else None
    chain: list[int] = []
    while last is not None:
        chain.append(last)
        last = came_from[last]
    return CriticalPath(tuple(reversed(chain)), length, tuple(finish), slack)
