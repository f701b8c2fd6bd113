"""One profile run against a server that is up: warm up, snapshot the statistics, send the requests,
snapshot again, read the DAG and the step configs from the server, and assemble the profile."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from conch.errors import ServeError
from conch.perf.profile.dag import dag_of
from conch.perf.profile.load import Body, Target, run
from conch.perf.profile.profile_report import Profile, RunInfo, assemble
from conch.perf.profile.server_statistics import StatsEndpoint
from conch.perf.profile.trace import trace_requests

DEFAULT_REQUESTS = 50
DEFAULT_CONCURRENCY = 1
WARMUP_ROUNDS = 2  # the first requests of a fresh model pay for lazy imports and allocations: not counted


@dataclass(frozen=True)
class Load:
    """What a profile sends: ``requests`` requests of the bodies in turn, ``concurrency`` at once."""

    bodies: tuple[Body, ...]
    payload: str  # how the bodies are described in the report
    requests: int = DEFAULT_REQUESTS
    concurrency: int = DEFAULT_CONCURRENCY

    def __post_init__(self) -> None:
        if not self.bodies:
            raise ServeError("nothing to send: the archive has no samples; give --payload FILE (a KServe v2 JSON "
                             "request)")
        if self.requests < 1 or self.concurrency < 1:
            raise ServeError(f"--requests {self.requests} and --concurrency {self.concurrency} must be at least 1")


def measure(stats: StatsEndpoint, target: Target, ensemble: str, load: Load, server: str,
            warmup: Sequence[Body] | None = None, trace_file: Path | None = None, alone: bool = False) -> Profile:
    """Profile ``ensemble`` (its name on the server) under ``load`` sent to ``target``; with ``trace_file`` (the
    server's `--trace-config triton,file=`), also one request traced after the measured run; ``alone``: the
    model of a single-model archive, profiled as a DAG of one step, itself."""
    for _ in range(WARMUP_ROUNDS):  # first: behind an MME front, the first call is what loads the model
        warm = run(target, tuple(warmup or load.bodies), len(warmup or load.bodies), 1)
        if warm.errors:
            raise ServeError(f"ensemble {ensemble!r} on {server}: the warm-up request failed: {warm.errors[0]}")
    config = stats.config(ensemble)
    dag = dag_of(config, alone=alone)
    configs = {ensemble: config, **{s.model: stats.config(s.model) for s in dag.steps}}
    models = list(configs)
    before = stats.snapshot(models)
    done = run(target, load.bodies, load.requests, load.concurrency)
    after = stats.snapshot(models)
    if not done.millis:
        raise ServeError(f"ensemble {ensemble!r} on {server}: every request failed, e.g. {done.errors[0]}")
    info = RunInfo(server, load.payload, load.requests, load.concurrency, done.seconds, done.client_ms(),
                   len(done.errors))
    profile = assemble(dag, before, after, configs, info, stats.quantiles())
    if trace_file is None:
        return profile
    traced = trace_requests(stats.http_url, trace_file, target, ensemble, load.bodies)
    return replace(profile, traced=traced)
