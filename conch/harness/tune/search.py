"""The guided search of `conch tune`: each round reads the current settings' profile (queue share, batch
achieved, the critical path), changes the step that limits it in the direction its figures point, and keeps
the change only when an A/B in the same run (the candidate, then the current settings measured again) says
it helped beyond the run's noise. It stops at the budget or when no change the figures point to helps. The
exhaustive grid over the same space is here too, for `benchmarks/tune_vs_grid.py`."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from conch.harness.profile.profile_report import Profile, StepProfile
from conch.harness.tune.space import Knobs, Levels, Settings, StepSpace, grid
from conch.harness.tune.trial import Trial, TrialServer

NOISE_FLOOR = 0.05  # a change must beat every measurement of the current settings by this share
PATIENCE = 3  # changes in a row that did not help before the search stops
QUEUE_SHARE = 0.3  # a step waiting this share of its time for an instance is short of instances


@dataclass(frozen=True)
class Move:
    """One candidate change: the settings it leads to, the step, what changes and the figure behind it."""

    settings: Settings
    step: StepSpace
    change: str
    why: str


@dataclass(frozen=True)
class Round:
    number: int
    move: Move
    trial: Trial  # the candidate measured
    base: Trial  # the current settings' trial it was compared with
    again: Trial | None  # the current settings measured again (only when the candidate looked better)
    noise: float  # the run's noise so far: the median spread of repeated measurements of the same settings
    kept: bool

    def verdict(self) -> str:
        floor = f"{NOISE_FLOOR:.0%}"
        if self.kept and self.again is not None:
            return (f"kept: {self.trial.figure()} beats the current settings' {self.base.figure()} and, measured "
                    f"again, {self.again.figure()}, by more than the run's noise so far ({self.noise:.0%}, at least "
                    f"{floor})")
        if self.again is not None:
            return (f"dropped: {self.trial.figure()}, but the current settings measured again gave "
                    f"{self.again.figure()} (the run's noise so far {self.noise:.0%})")
        return (f"dropped: {self.trial.figure()} does not beat {self.base.figure()} by the run's noise so far "
                f"({self.noise:.0%}, at least {floor})")

    def to_json(self) -> dict[str, Any]:
        return {"round": self.number, "ensemble": self.move.step.ensemble, "step": self.move.step.step,
                "change": self.move.change, "why": self.move.why, "kept": self.kept,
                "throughput_per_s": round(self.trial.throughput, 2), "baseline_per_s": round(self.base.throughput, 2),
                "again_per_s": None if self.again is None else round(self.again.throughput, 2),
                "noise": round(self.noise, 4), "verdict": self.verdict(), "trial": self.trial.number,
                "p50_ms": None if self.trial.best is None else round(self.trial.best.p50_ms, 2),
                "p99_ms": None if self.trial.best is None else round(self.trial.best.p99_ms, 2)}


@dataclass(frozen=True)
class Outcome:
    """What a search found: the first trial, every round, the chosen settings and their last measurement."""

    start: Trial
    rounds: tuple[Round, ...]
    chosen: Settings
    chosen_trial: Trial
    trials: int
    seconds: float
    stopped: str  # why the search ended


def _pressure(s: StepProfile) -> float:
    """Time the step held during the level (its part of each request times requests): what it takes of the
    shared CPU, so a mix weighs each ensemble's steps by their traffic."""
    return s.figures.work_ms * s.figures.requests


def _next(values: Sequence[int], current: int, up: bool) -> int | None:
    later = [v for v in values if (v > current if up else v < current)]
    return (min(later) if up else max(later)) if later else None


def moves(settings: Settings, profiles: Sequence[Profile], steps: Sequence[StepSpace],
          levels: Levels) -> Iterator[Move]:
    """The changes the figures point to, the step that limits the critical path first (by the time it holds)."""
    space = {(s.ensemble, s.model): s for s in steps}
    ranked: list[tuple[bool, float, StepProfile, StepSpace]] = []
    for profile in profiles:
        for sp in profile.steps:
            step = space.get((profile.ensemble, sp.model))
            if step is not None:
                ranked.append((sp.critical, _pressure(sp), sp, step))
    ranked.sort(key=lambda r: (not r[0], -r[1]))
    for _, _, sp, step in ranked:
        yield from _step_moves(settings, sp, step, levels)
    for _, _, sp, step in reversed(ranked):  # last: give back an instance where a step holds little
        k = settings.of(step)
        fewer = _next(levels.instances(), k.instances, up=False)
        if fewer is not None and sp.figures.queue_share < QUEUE_SHARE / 2:
            yield Move(settings.with_step(step, replace(k, instances=fewer)), step,
                       f"instances {k.instances} -> {fewer}",
                       f"queue {sp.figures.queue_share:.0%} of its time: its instances idle, the CPU may serve "
                       "another step")


def _step_moves(settings: Settings, sp: StepProfile, step: StepSpace, levels: Levels) -> Iterator[Move]:
    k, f = settings.of(step), sp.figures
    where = f"{sp.share:.0%} of end to end{', critical' if sp.critical else ''}"
    queued = f"queue {f.queue_share:.0%} of its time ({f.queue_ms:.1f} of {f.work_ms:.1f} ms), {where}"
    more = _next(levels.instances(), k.instances, up=True)

    def to(knobs: Knobs, change: str, why: str) -> Move:
        return Move(settings.with_step(step, knobs), step, change, why)

    if f.queue_share >= QUEUE_SHARE:
        if step.batches and not k.batching:
            yield to(replace(k, batching=True, delay_us=levels.delays_us[0], preferred=levels.preferred[0]),
                     f"dynamic batching on (delay {levels.delays_us[0]} us)", f"{queued}: merge what waits")
        if more is not None:
            yield to(replace(k, instances=more), f"instances {k.instances} -> {more}", f"{queued}: add an instance")
        if more is not None and step.batches and not k.batching:  # each alone may not pay; together they may
            yield to(replace(k, instances=more, batching=True, delay_us=levels.delays_us[0],
                             preferred=levels.preferred[0]),
                     f"instances {k.instances} -> {more} and dynamic batching on (delay {levels.delays_us[0]} us)",
                     f"{queued}: more instances, each taking what waits as one batch")
    if k.batching and f.executions and f.requests_per_execution < 1.1:
        longer = _next(levels.delays_us, k.delay_us, up=True)
        batch = f"batches of {f.requests_per_execution:.2f} requests per execution"
        if longer is not None:
            yield to(replace(k, delay_us=longer), f"max queue delay {k.delay_us} -> {longer} us",
                     f"{batch}: wait longer to form batches")
        yield to(replace(k, batching=False, delay_us=0, preferred=()), "dynamic batching off",
                 f"{batch}: batching merges nothing here")
    if k.batching and len(levels.preferred) > 1:
        for sizes in levels.preferred:
            if sizes != k.preferred:
                yield to(replace(k, preferred=sizes), f"preferred batch sizes {list(k.preferred)} -> {list(sizes)}",
                         f"batch size achieved {f.batch_size:.1f} rows per execution")
    if step.thread_keys:
        key = step.thread_keys[0]
        now = k.thread(key)
        values = levels.thread_values()
        if k.instances > 1 and (now is None or now > 1) and 1 in values:
            yield to(k.with_thread(key, 1), f"{key} {now or 'default'} -> 1",
                     f"{k.instances} instances each with {now or 'the default'} threads share the cores")
        if now is None and 1 in values and k.instances == 1:
            yield to(k.with_thread(key, 1), f"{key} default -> 1", "one thread per execution, so that another "
                     "instance or step has a core")
        # from the default (the backend takes every core), only fewer threads is a change
        up = _next(values, now, up=True) if now is not None else None
        if up is not None and f.queue_share < QUEUE_SHARE:
            yield to(k.with_thread(key, up), f"{key} {now} -> {up}",
                     f"compute {f.compute_infer_ms:.1f} ms per request, little queue: more threads per execution")
    if more is not None and f.queue_share < QUEUE_SHARE and sp.critical:
        yield to(replace(k, instances=more), f"instances {k.instances} -> {more}",
                 f"{where}: another instance runs requests side by side")
    if step.batches and not k.batching and f.queue_share < QUEUE_SHARE and sp.critical:
        yield to(replace(k, batching=True, delay_us=levels.delays_us[0], preferred=levels.preferred[0]),
                 f"dynamic batching on (delay {levels.delays_us[0]} us)", f"{where}: batch what arrives together")


def guided(server: TrialServer, start: Settings, levels: Levels, *, budget_s: float,
           max_trials: int | None = None, patience: int = PATIENCE,
           progress: Callable[[str], None] | None = None) -> Outcome:
    """Search from ``start`` until the budget (seconds, or trials) is spent, ``patience`` changes in a row did not
    help, or no change the figures point to is left."""
    say = progress or (lambda _: None)
    began = time.monotonic()
    first = server.measure(start)
    say(f"trial 1 (the start): {_figure(first)}")
    current, current_trial = start, first
    tried = {start}
    rounds: list[Round] = []
    noise, spreads = NOISE_FLOOR, list[float]()
    stopped = "no change the figures point to helped"
    while True:
        if time.monotonic() - began >= budget_s:
            stopped = f"the budget of {budget_s / 60:.1f} minutes was spent"
            break
        if max_trials is not None and len(server.trials) >= max_trials:
            stopped = f"the budget of {max_trials} trials was spent"
            break
        if patience and len(rounds) >= patience and not any(r.kept for r in rounds[-patience:]):
            stopped = f"{patience} changes in a row did not help"
            break
        move = next((m for m in moves(current, current_trial.profiles, server.tuned, levels)
                     if m.settings not in tried and m.settings.cpu_slots() <= levels.budget()), None)
        if move is None:
            break
        tried.add(move.settings)
        say(f"round {len(rounds) + 1}: {move.step.ensemble}/{move.step.step}: {move.change} ({move.why})")
        trial = server.measure(move.settings)
        base, again, kept = current_trial, None, False
        if trial.beats(base, noise):
            again = server.measure(current)  # the A/B: the current settings once more, in the same run
            a, b = again.throughput or -again.first_p99_ms, base.throughput or -base.first_p99_ms
            spreads.append(abs(a - b) / max(abs(a), abs(b), 1e-9))
            noise = max(NOISE_FLOOR, statistics.median(spreads))
            # beyond the run's noise (the median spread of repeated measurements, the floor at least): better than
            # both measurements of the current settings by that much
            kept = trial.beats(base, noise) and trial.beats(again, noise)
            if not kept and again.profiles:
                current_trial = again
        done = Round(len(rounds) + 1, move, trial, base, again, noise, kept)
        rounds.append(done)
        say(f"  {_figure(trial)}; {done.verdict()}")
        if kept:
            current, current_trial = move.settings, trial
    return Outcome(first, tuple(rounds), current, current_trial, len(server.trials), time.monotonic() - began,
                   stopped)


def exhaustive(server: TrialServer, start: Settings, levels: Levels,
               progress: Callable[[str], None] | None = None) -> list[Trial]:
    """Every setting of the grid over the tuned steps (the others at ``start``'s knobs), measured once each."""
    say = progress or (lambda _: None)
    found = []
    # the step slowest to reload changes slowest (a TensorFlow stand-in reloads in seconds, a Python step at once)
    steps = sorted(server.tuned, key=lambda s: -server.reload_s.get((s.ensemble, s.model), 0.0))
    for settings in grid(steps, levels, start):
        trial = server.measure(settings)
        say(f"grid trial {trial.number}: {_figure(trial)}")
        found.append(trial)
    return found


def _figure(trial: Trial) -> str:
    best = trial.best
    if best is None:
        return trial.figure()
    return (f"{best.throughput:.1f}/s at concurrency {best.concurrency} (p50 {best.p50_ms:.0f} ms, "
            f"p99 {best.p99_ms:.0f} ms)")
