"""What `conch tune` tells: each round's change, its figure and why it was tried; the before/after table
(throughput, p50, p99); the settings chosen per step; a picture of the rounds (matplotlib, Agg); and all of it
as JSON."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from conch.perf.tune.search import Outcome
from conch.perf.tune.space import Levels, StepSpace
from conch.perf.tune.trial import Trial


def _row(label: str, trial: Trial) -> tuple[str, str, str, str, str]:
    best = trial.best
    if best is None:
        return label, "0 (p99 over the target at every level)", "-", "-", "-"
    return label, f"{best.throughput:.1f}", f"{best.p50_ms:.1f}", f"{best.p99_ms:.1f}", str(best.concurrency)


def table(outcome: Outcome, steps: Sequence[StepSpace], p99_ms: float, server: str) -> str:
    """The report for people."""
    lines = [f"conch tune on {server}: the highest throughput whose p99 stays under {p99_ms:g} ms; "
             f"{outcome.trials} trials in {outcome.seconds:.0f} s; stopped: {outcome.stopped}", ""]
    lines.append("rounds:")
    if not outcome.rounds:
        lines.append("  (none)")
    for r in outcome.rounds:
        last = " (a last try)" if r.move.final else ""
        lines.append(f"  {r.number}. {r.move.step.ensemble} / {r.move.step.step}: {r.move.change}{last}")
        lines.append(f"     why: {r.move.why}")
        lines.append(f"     {r.verdict()}")
    rows = [("", "throughput/s", "p50 ms", "p99 ms", "at concurrency"), _row("before", outcome.start),
            _row("after", outcome.chosen_trial)]
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines += ["", *("  ".join(v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in
                              enumerate(zip(row, widths, strict=True))) for row in rows)]
    if outcome.start.throughput:
        lines.append(f"(after / before: {outcome.chosen_trial.throughput / outcome.start.throughput:.2f}x)")
    lines += ["", "chosen settings:"]
    for step in steps:
        lines.append(f"  {step.ensemble} / {step.step}: {outcome.chosen.of(step).text()}")
    return "\n".join(lines)


def to_json(outcome: Outcome, steps: Sequence[StepSpace], p99_ms: float, server: str, levels: Levels) -> dict[str, Any]:
    return {"server": server, "p99_target_ms": p99_ms, "levels": levels.to_json(), "trials": outcome.trials,
            "seconds": round(outcome.seconds, 1), "stopped": outcome.stopped,
            "before": outcome.start.to_json(), "after": outcome.chosen_trial.to_json(),
            "rounds": [r.to_json() for r in outcome.rounds],
            "chosen": [{"ensemble": s.ensemble, "step": s.step, "model": s.model, "kind": s.kind,
                        **outcome.chosen.of(s).to_json()} for s in steps]}


def rounds_png(outcome: Outcome, path: Path, p99_ms: float) -> Path:
    """Throughput per round (kept changes filled, dropped ones hollow) over the p99 each was measured at."""
    from conch.perf.load.plots import pyplot, save_png

    plt = pyplot()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6.5), constrained_layout=True, sharex=True)
    xs = [0] + [r.number for r in outcome.rounds]
    trials = [outcome.start, *(r.trial for r in outcome.rounds)]
    kept = [True] + [r.kept for r in outcome.rounds]
    # the current settings' throughput after each round: a kept change's, else what it was
    current = itertools.accumulate(outcome.rounds, lambda now, r: r.trial.throughput if r.kept else now,
                                   initial=outcome.start.throughput)
    top.step(xs, list(current), where="post", color="tab:green", label="current settings")
    for x, t, k in zip(xs, trials, kept, strict=True):
        top.plot(x, t.throughput, "o", color="tab:blue", fillstyle="full" if k else "none", markersize=8)
    top.plot([], [], "o", color="tab:blue", label="kept (filled) / dropped (hollow)")
    top.set_ylabel("throughput under the p99 target (/s)")
    top.legend(fontsize=8, loc="lower right")
    p99 = [t.best.p99_ms if t.best is not None else float("nan") for t in trials]
    bottom.plot(xs, p99, "^:", color="tab:purple", label="p99 at the best level")
    bottom.axhline(p99_ms, color="tab:red", alpha=0.5, label=f"target {p99_ms:g} ms")
    bottom.set_ylabel("p99 (ms)")
    bottom.set_xlabel("round (0: the start)")
    bottom.set_xticks(xs)
    bottom.legend(fontsize=8)
    fig.suptitle(f"conch tune: {outcome.trials} trials, {outcome.start.throughput:.1f}/s -> "
                 f"{outcome.chosen_trial.throughput:.1f}/s")
    return save_png(fig, path)
