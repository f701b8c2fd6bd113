"""One trial of `conch tune`: load the candidate settings on the server (each changed step reloaded with its
new config through Triton's model repository API, the files staying as built), warm up, then send the traffic
mix at rising concurrency until p99 passes the target or throughput stops growing. The trial's figure is the
highest throughput whose p99 stayed under the target; the step figures of that level come from Triton's
statistics around it (`conch profile`'s AroundLoad)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np

from conch.errors import BenchError
from conch.perf.profile.around import AroundLoad
from conch.perf.profile.load import Body, RunResult, Target, run
from conch.perf.profile.profile_report import Profile, RunInfo
from conch.perf.profile.server_statistics import StatsEndpoint
from conch.perf.tune.space import Settings, StepSpace, apply_knobs, knobs_of
from conch.triton.kserve_routes import model_path
from conch.triton.mme import DYING_S, Watched
from conch.triton.mme_contract import error_text

LOAD_TIMEOUT_S = 300.0
CONCURRENCY = (1, 2, 4, 8, 16, 32)
SATURATED = 1.05  # a level adding less than 5 % throughput over the best before it is flat
MIN_REQUESTS = 16  # per level: fewer, and p99 is the slowest request
PATIENCE = 1  # flat levels in a row the climb goes past (one may be the machine's noise)


@dataclass(frozen=True)
class Workload:
    """One ensemble's share of the traffic: where its requests go, what they carry, its weight in the mix."""

    name: str  # the ensemble's name on the server (its TargetModel)
    target: Target
    bodies: tuple[Body, ...]
    weight: float


@dataclass(frozen=True)
class Level:
    """The mix at one concurrency: requests/s that succeeded, client percentiles in ms, errors."""

    concurrency: int
    throughput: float
    p50_ms: float
    p99_ms: float
    requests: int
    errors: int
    first_error: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"concurrency": self.concurrency, "throughput_per_s": round(self.throughput, 2),
                "p50_ms": round(self.p50_ms, 2), "p99_ms": round(self.p99_ms, 2), "requests": self.requests,
                "errors": self.errors, "first_error": self.first_error}


@dataclass(frozen=True)
class Trial:
    """One measured setting: every level sent, the best level under the target and its profiles."""

    number: int
    settings: Settings
    levels: tuple[Level, ...]
    best: Level | None  # None: no level kept p99 under the target
    profiles: tuple[Profile, ...]
    seconds: float  # reload, warm-up and load

    @property
    def throughput(self) -> float:
        return self.best.throughput if self.best is not None else 0.0

    @property
    def first_p99_ms(self) -> float:
        """p99 at the lowest concurrency: what orders settings none of which meets the target."""
        return self.levels[0].p99_ms if self.levels else float("inf")

    def figure(self) -> str:
        """The trial's figure in words: its throughput, or its p99 when no level met the target."""
        if self.best is not None:
            return f"{self.throughput:.1f}/s"
        failed = next((lv for lv in self.levels if lv.errors), None)
        if failed is not None:
            return f"none under the target ({failed.errors} requests failed, e.g. {failed.first_error[:160]})"
        return f"none under the target (p99 {self.first_p99_ms:.0f} ms at concurrency 1)"

    def to_json(self) -> dict[str, Any]:
        return {"trial": self.number, "throughput_per_s": round(self.throughput, 2),
                "best": None if self.best is None else self.best.to_json(),
                "levels": [lv.to_json() for lv in self.levels], "seconds": round(self.seconds, 2),
                "settings": self.settings.to_json()}


def latency_target(p99_ms: float) -> float:
    """The p99 target, refused unless it is a number of milliseconds above 0."""
    if not p99_ms > 0:
        raise BenchError(f"--p99-ms {p99_ms:g}: give the latency target in milliseconds, above 0")
    return p99_ms


def load_route(model: str) -> str:
    """``/v2/repository/models/<model>/load``: Triton's model repository extension (explicit model control)."""
    return "/v2/repository" + model_path(model, "load").removeprefix("/v2")


class TrialServer:
    """A Triton the tune applies settings to and measures: the local tritonserver, the local MME's, or any
    Triton by URL with explicit model control. ``stats`` reads its statistics and configs."""

    def __init__(self, stats: StatsEndpoint, workloads: Sequence[Workload], steps: Sequence[StepSpace],
                 server: str, *, p99_ms: float, max_concurrency: int = 16, seconds_per_level: float = 2.0,
                 load_timeout: float = LOAD_TIMEOUT_S, progress: Callable[[str], None] | None = None,
                 watched: Watched | None = None) -> None:
        """``watched``: the local tritonserver behind ``stats``, when the tune started it: a reload that finds it
        gone names its death."""
        latency_target(p99_ms)
        self.watched = watched
        self.stats, self.workloads, self.steps, self.server = stats, tuple(workloads), tuple(steps), server
        self.p99_ms, self.max_concurrency, self.seconds_per_level = p99_ms, max_concurrency, seconds_per_level
        self.load_timeout = load_timeout
        self.progress = progress or (lambda _: None)
        self.base = {(s.ensemble, s.model): stats.config(s.model) for s in self.steps}
        self.declared = Settings({key: knobs_of(self.base[key], s) for s in self.steps
                                  for key in [(s.ensemble, s.model)]})
        self.loaded: Settings | None = self.declared
        self.tuned = self.steps  # the steps the search may change (`--step`); the others keep the start's knobs
        self.reload_s: dict[tuple[str, str], float] = {}  # the last reload of each step took this long
        self.trials: list[Trial] = []

    def only(self, names: Sequence[str]) -> None:
        """Tune only these steps (``step`` or ``TargetModel/step``); BenchError naming one that is not here."""
        def matches(step: StepSpace, name: str) -> bool:
            return name in (step.step, f"{step.ensemble}/{step.step}", f"{step.ensemble.removesuffix('.tar.gz')}/"
                            f"{step.step}")

        for name in names:
            if not any(matches(s, name) for s in self.steps):
                known = ", ".join(f"{s.ensemble.removesuffix('.tar.gz')}/{s.step}" for s in self.steps)
                raise BenchError(f"--step {name!r} is not a step of what is tuned here; the steps are {known}")
        self.tuned = tuple(s for s in self.steps if any(matches(s, n) for n in names)) if names else self.steps

    def apply(self, settings: Settings) -> None:
        """Reload each step whose knobs differ from what is loaded, with its config changed accordingly."""
        for step in self.steps:
            knobs = settings.of(step)
            if self.loaded is not None and self.loaded.of(step) == knobs:
                continue
            config = apply_knobs(self.base[(step.ensemble, step.model)], step, knobs)
            url = f"{self.stats.http_url.rstrip('/')}{load_route(step.model)}"
            began = time.monotonic()
            try:
                answer = httpx.post(url, json={"parameters": {"config": json.dumps(config)}},
                                    timeout=self.load_timeout)
            except httpx.HTTPError as exc:
                gone = self.watched.lost(f"reloading step {step.step!r}", DYING_S) if self.watched else None
                if gone is not None:
                    raise gone from None
                raise BenchError(f"{self.server} did not answer the reload of step {step.step!r} ({exc})") from None
            if answer.status_code != 200:
                why = error_text(answer.content, answer.reason_phrase or "")
                raise BenchError(f"{self.server} refused to load step {step.step!r} of {step.ensemble} with "
                                 f"{knobs.text()} ([{answer.status_code}] {why}); see the server's log. The tune "
                                 "reloads steps through Triton's model repository API, which a Triton started without "
                                 "--model-control-mode=explicit refuses")
            self.reload_s[(step.ensemble, step.model)] = time.monotonic() - began
        self.loaded = settings

    def _warm(self, settings: Settings) -> None:
        most = max(k.instances for k in settings.knobs.values())
        for w in self.workloads:
            warm = run(w.target, w.bodies, 2 * len(w.bodies) * most, most)
            if warm.errors:
                raise BenchError(f"{w.name} on {self.server}: the warm-up request failed: {warm.errors[0]}")

    def _level(self, concurrency: int, total: int, earlier: Sequence[RunResult] = (),
               earlier_s: float = 0.0) -> tuple[Level, float, list[RunResult]]:
        """Send ``total`` requests of the mix with ``concurrency`` in flight, split by weight; with ``earlier``
        (a first run of this level), the figures are of both runs together."""
        shares = [(w, max(1, round(concurrency * w.weight)), max(1, round(total * w.weight))) for w in self.workloads]
        found: list[RunResult | None] = [None] * len(shares)

        def one(i: int) -> None:
            w, c, n = shares[i]
            found[i] = run(w.target, w.bodies, max(n, c), c)

        threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(len(shares))]
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        seconds = time.perf_counter() - start + earlier_s
        results = [*earlier, *(r for r in found if r is not None)]
        millis = np.array([m for r in results for m in r.millis])
        errors = sum(len(r.errors) for r in results)
        first = next((r.errors[0] for r in results if r.errors), "")
        if not millis.size:  # every request failed: the level fails the target, the error is reported
            return Level(concurrency, 0.0, float("inf"), float("inf"), 0, errors, first), seconds, results
        level = Level(concurrency, millis.size / seconds, float(np.percentile(millis, 50)),
                      float(np.percentile(millis, 99)), int(millis.size), errors, first)
        return level, seconds, results

    def measure(self, settings: Settings) -> Trial:
        """Apply ``settings`` and climb the concurrency ladder; one more trial."""
        start = time.monotonic()
        self.apply(settings)
        self._warm(settings)
        levels: list[Level] = []
        best: Level | None = None
        profiles: tuple[Profile, ...] = ()
        rate, flat = 0.0, 0
        for concurrency in (c for c in CONCURRENCY if c <= self.max_concurrency):
            total = max(MIN_REQUESTS, 4 * concurrency, round(rate * self.seconds_per_level))
            around = AroundLoad(self.stats, [w.name for w in self.workloads]).start()
            level, seconds, runs = self._level(concurrency, total)
            if level.p99_ms > self.p99_ms and not level.errors:  # past the target: once more, both runs together,
                level, seconds, _ = self._level(concurrency, total, runs, seconds)  # so one stall is not the p99
            levels.append(level)
            under = level.p99_ms <= self.p99_ms and not level.errors
            if (under and (best is None or level.throughput > best.throughput)) or not profiles:
                info = RunInfo(self.server, "the tune's mix", level.requests, concurrency, seconds,
                               {"p50": level.p50_ms, "p99": level.p99_ms}, level.errors)
                profiles = tuple(around.finish(info))  # the best level's; the first level's when none kept p99
                best = level if under and (best is None or level.throughput > best.throughput) else best
            flat = flat + 1 if rate and level.throughput < rate * SATURATED else 0
            if not under or flat > PATIENCE:
                break
            rate = max(rate, level.throughput)
        trial = Trial(len(self.trials) + 1, settings, tuple(levels), best, profiles, time.monotonic() - start)
        self.trials.append(trial)
        return trial


def weights_of(names: Sequence[str], mix: Mapping[str, float] | str | None) -> dict[str, float]:
    """Weights per ensemble, summing to 1: even (None), Zipf over the order given (``"zipf"``), or given."""
    if not names:
        raise BenchError("nothing to tune: give ensemble files or archives")
    if mix is None:
        raw = {n: 1.0 for n in names}
    elif mix == "zipf":
        raw = {n: 1.0 / (i + 1) for i, n in enumerate(names)}
    elif isinstance(mix, str):
        raise BenchError(f"--mix {mix!r}: give 'zipf' or NAME=WEIGHT,... (weights per TargetModel)")
    else:
        unknown = sorted(set(mix) - set(names))
        if unknown:
            raise BenchError(f"--mix names {', '.join(unknown)}, which are not tuned here; the TargetModels are "
                             f"{', '.join(names)}")
        raw = {n: float(mix.get(n, 0.0)) for n in names}
        if any(v < 0 for v in raw.values()) or not sum(raw.values()):
            raise BenchError("--mix weights must be 0 or more and not all 0")
    total = sum(raw.values())
    return {n: v / total for n, v in raw.items() if v > 0}
