"""The guided search of `conch tune`: each round reads the current settings' profile (queue share, batch
achieved, the critical path), changes the step that limits it in the direction its figures point, and keeps
the change only when an A/B in the same run (the candidate, then the current settings measured again) says
it helped beyond the run's noise. It stops at the budget or when no change the figures point to helps. The
exhaustive grid over the same space is here too, for `benchmarks/tune_vs_grid.py`."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from conch.perf.profile.profile_report import Profile, StepProfile
from conch.perf.tune.space import Knobs, Levels, Settings, StepSpace, grid
from conch.perf.tune.trial import Trial, TrialServer

NOISE_FLOOR = 0.05  # a change must beat every measurement of the current settings by this share
PATIENCE = 3  # changes in a row that did not help before the search stops
QUEUE_SHARE = 0.3  # a step waiting this share of its time for an instance is short of instances
DOMINANT = 0.5  # a critical step holding this share of end to end is the limit even without a queue at the level
MIN_TRIALS_PER_ROUND = 2  # a candidate, and the current settings measured again: a change is never kept on one


@dataclass(frozen=True)
class Move:
    """One candidate change: the settings it leads to, the step, what changes and the figure behind it.
    ``tier`` orders the moves of every step: 0 the one the figures point to first (the likeliest win), then 1,
    2; the last tier gives CPU back. ``final``: tried once more after the search would have stopped."""

    settings: Settings
    step: StepSpace
    change: str
    why: str
    tier: int = 0
    final: bool = False


def _mean(trials: Sequence[Trial]) -> float:
    return statistics.fmean(t.throughput for t in trials)


def better(a: Sequence[Trial], b: Sequence[Trial], margin: float) -> bool:
    """``a``'s measurements beat ``b``'s by more than ``margin``: the mean throughput under the target; when
    neither met the target at any level, the mean p99 at the lowest concurrency, lower by the margin."""
    a_meets, b_meets = any(t.best is not None for t in a), any(t.best is not None for t in b)
    if a_meets and b_meets:
        return _mean(a) > _mean(b) * (1 + margin)
    if a_meets or b_meets:
        return a_meets
    return (statistics.fmean(t.first_p99_ms for t in a) <
            statistics.fmean(t.first_p99_ms for t in b) * (1 - margin))


def _figures(trials: Sequence[Trial]) -> str:
    text = " and ".join(t.figure() for t in trials)
    return text if len(trials) < 2 or any(t.best is None for t in trials) else f"{text} (mean {_mean(trials):.1f}/s)"


@dataclass(frozen=True)
class Round:
    """One change tried: every measurement of the candidate and of the current settings it was judged
    against (the earlier ones first), the margin it had to beat and how it was decided."""

    number: int
    move: Move
    candidate: tuple[Trial, ...]  # the candidate, measured once, or twice on a close call
    current: tuple[Trial, ...]  # the current settings: the measurements before the round, then those taken in it
    noise: float  # the run's noise so far: the median spread of repeated measurements of the same settings
    kept: bool
    decided: str  # "clear": one measurement each way, beyond the noise; "close": A/B/A/B; "below"; "budget"

    @property
    def trial(self) -> Trial:
        return self.candidate[0]

    def margin(self) -> float:
        return close_margin(self.noise) if self.decided == "close" else max(NOISE_FLOOR, self.noise)

    def verdict(self) -> str:
        floor = f"{NOISE_FLOOR:.0%}"
        cand, cur = _figures(self.candidate), _figures(self.current)
        if self.decided == "close":
            how = (f"a close call, measured again (A/B/A/B): the candidate {cand} against the current settings "
                   f"{cur}, a margin of {self.margin():.0%} for means of two (the run's noise so far "
                   f"{self.noise:.0%} over the square root of 2, at least {close_margin(0):.0%})")
            return f"kept: {how}" if self.kept else f"dropped: {how}"
        if self.decided == "budget":
            return (f"dropped: {cand} against the current settings' {cur}, and no trial of the budget was left to "
                    "measure it again")
        if self.kept:
            return (f"kept: {self.trial.figure()} beats the current settings' {cur} by more than the run's noise so "
                    f"far ({self.noise:.0%}, at least {floor})")
        return (f"dropped: {cand} does not beat the current settings' {cur} (the run's noise so far "
                f"{self.noise:.0%}, at least {floor})")

    def to_json(self) -> dict[str, Any]:
        return {"round": self.number, "ensemble": self.move.step.ensemble, "step": self.move.step.step,
                "change": self.move.change, "why": self.move.why, "final": self.move.final, "kept": self.kept,
                "decided": self.decided,
                "throughput_per_s": round(self.trial.throughput, 2),
                "baseline_per_s": round(self.current[0].throughput, 2),  # then, if measured again (the A/B), again
                "again_per_s": round(self.current[-1].throughput, 2) if len(self.current) > 1 else None,
                "candidate_per_s": [round(t.throughput, 2) for t in self.candidate],
                "current_per_s": [round(t.throughput, 2) for t in self.current],
                "noise": round(self.noise, 4), "margin": round(self.margin(), 4), "verdict": self.verdict(),
                "trials": [t.number for t in self.candidate],
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


def close_margin(noise: float) -> float:
    """What the mean of two measurements of a candidate must beat the mean of two of the current settings by:
    the noise of a mean of two (the run's noise over the square root of 2), half the floor at least."""
    return max(NOISE_FLOOR / 2, noise / math.sqrt(2))


def _pressure(s: StepProfile) -> float:
    """Time the step held during the level (its part of each request times requests): what it takes of the
    shared CPU, so a mix weighs each ensemble's steps by their traffic."""
    return s.figures.work_ms * s.figures.requests


def _next(values: Sequence[int], current: int, up: bool) -> int | None:
    later = [v for v in values if (v > current if up else v < current)]
    return (min(later) if up else max(later)) if later else None


def fit_threads(knobs: Knobs, step: StepSpace, levels: Levels) -> Knobs:
    """``knobs`` with the step's threads per instance cut so that instances x threads fit the cores (the largest
    thread level that does, the smallest level when none does); unchanged when they fit already. A backend's
    default takes every core."""
    if not step.thread_keys:
        return knobs
    key, cores = step.thread_keys[0], levels.cores()
    now = knobs.thread(key)
    if knobs.instances * (now if now is not None else cores) <= cores:
        return knobs
    values = levels.thread_values()
    fitting = [v for v in values if knobs.instances * v <= cores]
    return knobs.with_thread(key, max(fitting) if fitting else min(values))


def _ranked(profiles: Sequence[Profile], steps: Sequence[StepSpace]) -> list[tuple[StepProfile, StepSpace]]:
    """The tuned steps, the ones on the critical path first, then by the time each held."""
    space = {(s.ensemble, s.model): s for s in steps}
    ranked: list[tuple[bool, float, StepProfile, StepSpace]] = []
    for profile in profiles:
        for sp in profile.steps:
            step = space.get((profile.ensemble, sp.model))
            if step is not None:
                ranked.append((sp.critical, _pressure(sp), sp, step))
    ranked.sort(key=lambda r: (not r[0], -r[1]))
    return [(sp, step) for _, _, sp, step in ranked]


def moves(settings: Settings, profiles: Sequence[Profile], steps: Sequence[StepSpace],
          levels: Levels) -> Iterator[Move]:
    """The changes the figures point to, the likeliest win first: every step's first move (tier 0) before any
    step's second, and within a tier the step that limits the critical path first (by the time it holds)."""
    ranked = _ranked(profiles, steps)
    found: list[tuple[int, int, int, Move]] = []
    for rank, (sp, step) in enumerate(ranked):
        found += [(m.tier, rank, order, m) for order, m in enumerate(_step_moves(settings, sp, step, levels))]
    for rank, (sp, step) in enumerate(reversed(ranked)):  # last: give back an instance where a step holds little
        k = settings.of(step)
        fewer = _next(levels.instances(), k.instances, up=False)
        if fewer is not None and sp.figures.queue_share < QUEUE_SHARE / 2:
            found.append((3, rank, 0, Move(settings.with_step(step, replace(k, instances=fewer)), step,
                                           f"instances {k.instances} -> {fewer}",
                                           f"queue {sp.figures.queue_share:.0%} of its time: its instances idle, the "
                                           "CPU may serve another step", 3)))
    found.sort(key=lambda f: f[:3])
    yield from (m for *_, m in found)


def _batching_on(knobs: Knobs, levels: Levels) -> Knobs:
    return replace(knobs, batching=True, delay_us=levels.delays_us[0], preferred=levels.preferred[0])


def _threads_text(before: Knobs, after: Knobs, step: StepSpace) -> str:
    if not step.thread_keys or before.threads == after.threads:
        return ""
    key = step.thread_keys[0]
    return f", {key} {before.thread(key) or 'default'} -> {after.thread(key)}"


def _grown(k: Knobs, more: int, step: StepSpace, levels: Levels, batching: bool = False) -> tuple[Knobs, str]:
    """An instance more (and batching on), threads per instance cut to fit the cores in the same move."""
    new = fit_threads(replace(_batching_on(k, levels) if batching else k, instances=more), step, levels)
    return new, f"instances {k.instances} -> {more}{_threads_text(k, new, step)}"


def _step_moves(settings: Settings, sp: StepProfile, step: StepSpace, levels: Levels) -> Iterator[Move]:
    k, f = settings.of(step), sp.figures
    where = f"{sp.share:.0%} of end to end{', critical' if sp.critical else ''}"
    queued = f"queue {f.queue_share:.0%} of its time ({f.queue_ms:.1f} of {f.work_ms:.1f} ms), {where}"
    more = _next(levels.instances(), k.instances, up=True)
    cores = levels.cores()

    def to(knobs: Knobs, change: str, why: str, tier: int) -> Move:
        return Move(settings.with_step(step, knobs), step, change, why, tier)

    def grown(batching: bool = False) -> tuple[Knobs, str]:
        assert more is not None
        return _grown(k, more, step, levels, batching)

    fits = f" ({cores} cores: instances x threads fit them)"
    # a trial's profile is of its best level; when one more request in flight added no throughput, that level
    # may show no queue at the step that limits it: a critical step holding most of end to end is short too
    dominant = sp.critical and sp.share >= DOMINANT and f.queue_share < QUEUE_SHARE
    if dominant:
        queued = f"{where}, queue {f.queue_share:.0%} of its time at the best level: it holds most of each request"
    if f.queue_share >= QUEUE_SHARE or dominant:  # short of instances: the combined move first, each half after it
        if more is not None and step.batches and not k.batching:
            new, change = grown(batching=True)
            yield to(new, f"{change}, dynamic batching on (delay {levels.delays_us[0]} us)",
                     f"{queued}: more instances, each taking what waits as one batch"
                     f"{fits if new.threads != k.threads else ''}", 0)
            new, change = grown()
            yield to(new, change, f"{queued}: add an instance{fits if new.threads != k.threads else ''}", 1)
            yield to(_batching_on(k, levels), f"dynamic batching on (delay {levels.delays_us[0]} us)",
                     f"{queued}: merge what waits", 1)
        elif more is not None:
            new, change = grown()
            yield to(new, change, f"{queued}: add an instance{fits if new.threads != k.threads else ''}", 0)
        elif step.batches and not k.batching:
            yield to(_batching_on(k, levels), f"dynamic batching on (delay {levels.delays_us[0]} us)",
                     f"{queued}: merge what waits (the instances are at the most)", 0)
    if k.batching and f.executions and f.requests_per_execution < 1.1:
        longer = _next(levels.delays_us, k.delay_us, up=True)
        batch = f"batches of {f.requests_per_execution:.2f} requests per execution"
        if longer is not None:
            yield to(replace(k, delay_us=longer), f"max queue delay {k.delay_us} -> {longer} us",
                     f"{batch}: wait longer to form batches", 1)
        yield to(replace(k, batching=False, delay_us=0, preferred=()), "dynamic batching off",
                 f"{batch}: batching merges nothing here", 2)
    if k.batching and len(levels.preferred) > 1:
        for sizes in levels.preferred:
            if sizes != k.preferred:
                yield to(replace(k, preferred=sizes), f"preferred batch sizes {list(k.preferred)} -> {list(sizes)}",
                         f"batch size achieved {f.batch_size:.1f} rows per execution", 2)
    if step.thread_keys:
        key = step.thread_keys[0]
        now = k.thread(key)
        values = levels.thread_values()
        fitted = fit_threads(k, step, levels)
        if fitted != k:
            yield to(fitted, f"{key} {now or 'default'} -> {fitted.thread(key)}",
                     f"{k.instances} instances each with {now or 'the default (every core)'} threads: "
                     f"instances x threads fit the {cores} cores", 0)
        elif now is None and 1 in values and k.instances == 1:
            yield to(k.with_thread(key, 1), f"{key} default -> 1", "one thread per execution (the default takes "
                     "every core), so that another instance or step has a core", 1)
        # from the default (the backend takes every core), only fewer threads is a change
        up = _next(values, now, up=True) if now is not None else None
        if up is not None and f.queue_share < QUEUE_SHARE and k.instances * up <= cores:
            yield to(k.with_thread(key, up), f"{key} {now} -> {up}",
                     f"compute {f.compute_infer_ms:.1f} ms per request, little queue: more threads per execution", 2)
    if more is not None and f.queue_share < QUEUE_SHARE and sp.critical and not dominant:
        new, change = grown()
        yield to(new, change, f"{where}: another instance runs requests side by side", 1)
    if step.batches and not k.batching and f.queue_share < QUEUE_SHARE and sp.critical and not dominant:
        yield to(_batching_on(k, levels), f"dynamic batching on (delay {levels.delays_us[0]} us)",
                 f"{where}: batch what arrives together", 2)


def final_moves(settings: Settings, profiles: Sequence[Profile], steps: Sequence[StepSpace],
                levels: Levels) -> list[Move]:
    """What is tried once more before the search stops: the limiting step's combined move from the current
    settings (an instance more, batching on where it batches, threads fitting the cores), then the two steps
    that hold the most time each with an instance more, together, or one at a time where both at once pass the
    CPU budget."""
    ranked = _ranked(profiles, steps)
    found: list[Move] = []
    if ranked:
        sp, step = ranked[0]
        k = settings.of(step)
        more = _next(levels.instances(), k.instances, up=True)
        if more is not None:
            new, change = _grown(k, more, step, levels, step.batches and not k.batching)
            if new.batching and not k.batching:
                change += f", dynamic batching on (delay {levels.delays_us[0]} us)"
            found.append(Move(settings.with_step(step, new), step, change,
                              f"the last try before stopping: the step that limits the critical path "
                              f"({sp.share:.0%} of end to end, queue {sp.figures.queue_share:.0%}), its combined move "
                              "from the current settings", 0, final=True))
    grow = [(sp, step) for sp, step in ranked
            if _next(levels.instances(), settings.of(step).instances, up=True) is not None][:2]
    singles, both, parts = [], settings, []
    for _, step in grow:
        k = settings.of(step)
        more = _next(levels.instances(), k.instances, up=True)
        assert more is not None
        new, change = _grown(k, more, step, levels)
        both = both.with_step(step, new)
        parts.append(f"{step.step} {change}")
        singles.append(Move(settings.with_step(step, new), step, change, "the last try before stopping: one of the "
                            "two steps that hold the most time, an instance more (both at once pass the CPU budget)",
                            0, final=True))
    if len(grow) == 2 and both.cpu_slots() <= levels.budget():
        found.append(Move(both, grow[0][1], " and ".join(parts),
                          "the last try before stopping: the two steps that hold the most time, an instance more "
                          "each, together", 0, final=True))
    elif len(grow) == 2:
        found += [m for m in singles if all(m.settings != f.settings for f in found)]
    return found


def guided(server: TrialServer, start: Settings, levels: Levels, *, budget_s: float,
           max_trials: int | None = None, patience: int = PATIENCE,
           progress: Callable[[str], None] | None = None) -> Outcome:
    """Search from ``start`` until the budget (seconds, or trials: every measurement counts, the A/B's too) is
    spent, or ``patience`` changes in a row did not help (or no change the figures point to is left) and the
    last tries (`final_moves`) did not help either."""
    say = progress or (lambda _: None)
    began = time.monotonic()
    first = server.measure(start)
    say(f"trial 1 (the start): {_figure(first)}")
    current, runs = start, [first]  # the current settings and their measurements, the latest last
    measured = {start: 1}  # settings -> how often they were measured as a candidate (the start once)
    rounds: list[Round] = []
    spreads: list[float] = []
    noise = NOISE_FLOOR
    pending: list[Move] = []  # the last tries, once the search would stop
    last_tried = False  # the last tries were made since the last kept change
    stopped = "no change the figures point to helped"

    def left() -> int:
        return (max_trials - len(server.trials)) if max_trials is not None else 1 << 30

    def spread(a: Trial, b: Trial) -> None:
        """Two measurements of the same settings: their spread is the run's noise. The run's first trial is left
        out: it is measured on a server just loaded (each instance's first executions), which the next are not."""
        nonlocal noise
        if first in (a, b):
            return
        x, y = a.throughput or -a.first_p99_ms, b.throughput or -b.first_p99_ms
        spreads.append(abs(x - y) / max(abs(x), abs(y), 1e-9))
        noise = max(NOISE_FLOOR, statistics.median(spreads))

    while True:
        if time.monotonic() - began >= budget_s:
            stopped = f"the budget of {budget_s / 60:.1f} minutes was spent"
            break
        if left() < MIN_TRIALS_PER_ROUND:
            stopped = f"the budget of {max_trials} trials was spent"
            break
        move: Move | None = None
        if not pending:
            tired = bool(patience) and len(rounds) >= patience and not any(r.kept for r in rounds[-patience:])
            if not tired:
                move = next((m for m in moves(current, runs[-1].profiles, server.tuned, levels)
                             if m.settings not in measured and m.settings.cpu_slots() <= levels.budget()), None)
            if move is None:
                why = f"{patience} changes in a row did not help" if tired else "no change the figures point to helped"
                if last_tried:
                    stopped = f"{why}, nor did the last tries"
                    break
                last_tried = True
                pending = [m for m in final_moves(current, runs[-1].profiles, server.tuned, levels)
                           if measured.get(m.settings, 0) < 2 and m.settings.cpu_slots() <= levels.budget()]
                if not pending:
                    stopped = why
                    break
                say(f"{why}: the last tries")
        if move is None:
            move = pending.pop(0)
        measured[move.settings] = measured.get(move.settings, 0) + 1
        say(f"round {len(rounds) + 1}: {move.step.ensemble}/{move.step.step}: {move.change} ({move.why})")
        candidate = [server.measure(move.settings)]
        before = runs[-2:]  # the current settings' latest measurements: their mean is the figure to beat
        new: list[Trial] = []
        kept, decided = False, "below"
        if better(candidate, before, 0.0):  # it looks better: the A/B decides
            clear = better(candidate, before, noise)
            if left() >= 1:
                new.append(server.measure(current))  # the current settings once more, in the same run
                spread(runs[-1], new[-1])
            if clear and new and better(candidate, new, noise):
                kept, decided = True, "clear"
            elif new and left() >= 1:  # a close call: A/B/A/B (current, candidate, current, candidate), means of two
                candidate.append(server.measure(move.settings))
                spread(candidate[0], candidate[1])
                before, decided = runs[-1:], "close"
                kept = better(candidate, [*before, *new], close_margin(noise))
            else:
                decided = "budget"
        done = Round(len(rounds) + 1, move, tuple(candidate), (*before, *new), noise, kept, decided)
        rounds.append(done)
        say(f"  {_figure(candidate[-1])}; {done.verdict()}")
        if kept:
            current, runs = move.settings, candidate
            pending, last_tried = [], False
        else:
            runs += new
    chosen_trial = runs[-1]
    return Outcome(first, tuple(rounds), current, chosen_trial, len(server.trials), time.monotonic() - began,
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
