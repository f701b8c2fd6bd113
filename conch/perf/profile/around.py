"""Profiles around a load conch does not send itself (`conch bench --profile`, `conch replay --profile`):
statistics before, the load, statistics after. A model the server has not loaded yet at the start (the local
MME loads on first call) counts from its load."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from conch.errors import ServeError
from conch.perf.profile.dag import dag_of
from conch.perf.profile.profile_report import Profile, RunInfo, assemble
from conch.perf.profile.server_statistics import StatsEndpoint


class AroundLoad:
    """``start()`` before the load, ``finish(run)`` after it: one profile per ensemble (its name on the server)."""

    def __init__(self, stats: StatsEndpoint, ensembles: Sequence[str]) -> None:
        self.stats = stats
        self.ensembles = tuple(ensembles)
        self.before: dict[str, Mapping[str, Any]] = {}

    def _models(self, ensemble: str) -> dict[str, dict[str, Any]]:
        config = self.stats.config(ensemble)
        return {ensemble: config, **{s.model: self.stats.config(s.model) for s in dag_of(config).steps}}

    def start(self) -> AroundLoad:
        for ensemble in self.ensembles:
            try:
                self.before.update(self.stats.snapshot(self._models(ensemble)))
            except ServeError:  # not loaded yet: its statistics start at zero when it loads
                continue
        return self

    def finish(self, run: RunInfo) -> list[Profile]:
        quantiles = self.stats.quantiles()
        profiles = []
        for ensemble in self.ensembles:
            configs = self._models(ensemble)
            after = self.stats.snapshot(configs)
            profiles.append(assemble(dag_of(configs[ensemble]), self.before, after, configs, run, quantiles))
        return profiles


def bench_run(summary: Mapping[str, Any], server: str) -> RunInfo:
    """How a bench's load went, in a profile's terms (the most users at once stand for the concurrency)."""
    stages = summary.get("stages") or [{}]
    warm = summary.get("warm") or {}
    client = {k: float(warm[f"{k}_ms"]) for k in ("mean", "p50", "p99") if warm.get(f"{k}_ms") is not None}
    return RunInfo(server, "the bench's payloads", int(summary.get("requests", 0)),
                   max(int(s.get("users", 1)) for s in stages), float(summary.get("duration_s", 0.0)), client,
                   int(summary.get("failures", 0)))
