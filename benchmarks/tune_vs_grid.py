"""`conch tune`'s guided search against the exhaustive grid over the same space, in one run on one server:
started from the defaults (one instance per step, no dynamic batching, default threads), the tune searches;
then every setting of the grid is measured once; then the grid's best and the tune's choice are measured again
head to head, alternating (`--rounds` each), since the best of many noisy trials is biased upward. The tune
may measure at most a fifth of the grid's settings (`--max-trials`), every measurement counted.

    python benchmarks/tune_vs_grid.py ensembles/text_embeddings.py --p99-ms 1000 --max-instances 2 \\
        --delays-us 0 --threads 1,2 --name text_embeddings
    python benchmarks/tune_vs_grid.py A.tar.gz B.tar.gz --mme --mix A.tar.gz=3,B.tar.gz=1 --step encoder ...

Prints a table and writes benchmarks/results/tune_vs_grid_<name>.json (every trial's levels and settings)."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import ROOT, alternate, finish, median

sys.path.insert(0, str(ROOT / "ensembles"))


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(v) for v in text.split(",") if v.strip())


def _archives(paths: list[Path], out: Path) -> list[Path]:
    from conch.builder.discover import discover
    from conch.builder.repository_build import build_ensemble

    found = [p for p in paths if p.name.endswith(".tar.gz")]
    sources = [p for p in paths if not p.name.endswith(".tar.gz")]
    for ensemble in discover(sources) if sources else []:
        print(f"building {ensemble.name} (local)", flush=True)
        found.append(build_ensemble(ensemble, out, "local"))
    return found


def main() -> int:
    from conch.perf.tune.search import exhaustive, guided
    from conch.perf.tune.servers import local_server
    from conch.perf.tune.space import Knobs, Levels, Settings, grid_size

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("paths", nargs="+", type=Path)
    p.add_argument("--name", default="run", help="names the JSON: results/tune_vs_grid_<name>.json")
    p.add_argument("--mme", action="store_true", help="through the local MME's front (default: the local tritonserver)")
    p.add_argument("--mix", help="a.tar.gz=3,b.tar.gz=1 or zipf (default even)")
    p.add_argument("--step", action="append", help="tune only these steps (both searches)")
    p.add_argument("--p99-ms", type=float, default=1000.0)
    p.add_argument("--max-instances", type=int, default=2)
    p.add_argument("--delays-us", type=_ints, default=(0,))
    p.add_argument("--threads", type=_ints, default=(1, 2))
    p.add_argument("--cpu-budget", type=int, default=0)
    p.add_argument("--max-concurrency", type=int, default=8)
    p.add_argument("--seconds-per-level", type=float, default=1.5)
    p.add_argument("--rounds", type=int, default=3, help="head-to-head measurements of each final setting")
    p.add_argument("--max-trials", type=int, default=0, help="the tune's budget of trials, every measurement counted "
                   "(default: a fifth of the grid's settings, the issue's bar)")
    args = p.parse_args()
    mix: Any = None
    if args.mix:
        mix = args.mix if args.mix == "zipf" else {k: float(v) for k, v in
                                                   (part.split("=") for part in args.mix.split(","))}
    levels = Levels(args.max_instances, args.delays_us, ((),), args.threads, args.cpu_budget)
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="tune-vs-grid-") as tmp:
        archives = _archives(args.paths, Path(tmp))
        with local_server(archives, mode="mme" if args.mme else "triton", mix=mix, p99_ms=args.p99_ms,
                          max_concurrency=args.max_concurrency, seconds_per_level=args.seconds_per_level,
                          progress=print) as server:
            server.only(args.step or [])
            start = Settings({(s.ensemble, s.model): Knobs() for s in server.steps})
            size = grid_size(server.tuned, levels, start)
            cap = args.max_trials or size // 5
            print(f"space: {len(server.tuned)} steps tuned, grid of {size} settings; the tune may measure {cap} "
                  "times", flush=True)
            began = time.monotonic()
            outcome = guided(server, start, levels, budget_s=24 * 3600, max_trials=cap, progress=print)
            tune_s = time.monotonic() - began
            tune_trials = len(server.trials)
            began = time.monotonic()
            trials = exhaustive(server, start, levels, progress=print)
            grid_s = time.monotonic() - began
            best = max(trials, key=lambda t: (t.throughput, -t.first_p99_ms))
            again = alternate({"grid": lambda: server.measure(best.settings).throughput,
                               "tune": lambda: server.measure(outcome.chosen).throughput}, args.rounds)
    g, t = median(again["grid"]), median(again["tune"])
    # the tune's choice as the grid measured it: the same method and moment as the grid's best
    same = next((x for x in trials if x.settings == outcome.chosen), None)
    in_grid = same.throughput if same is not None else None
    rows = [
        ["grid", size, f"{grid_s:.0f}", f"{best.throughput:.1f}", _p(best, "p50_ms"), _p(best, "p99_ms"), f"{g:.1f}"],
        ["tune", tune_trials, f"{tune_s:.0f}", f"{outcome.chosen_trial.throughput:.1f}",
         _p(outcome.chosen_trial, "p50_ms"), _p(outcome.chosen_trial, "p99_ms"), f"{t:.1f}"],
        ["tune / grid", f"{tune_trials / size:.2f}", "", f"{outcome.chosen_trial.throughput / best.throughput:.2f}",
         "", "", f"{t / g:.2f}"],
    ]
    print("\nchosen by the grid: " + "; ".join(f"{m}: {k.text()}" for (_, m), k in sorted(best.settings.knobs.items())))
    print("chosen by the tune: " + "; ".join(f"{m}: {k.text()}" for (_, m), k in
                                                sorted(outcome.chosen.knobs.items())))
    if in_grid is not None:
        print(f"the tune's choice as the grid measured it: {in_grid:.1f}/s, {in_grid / best.throughput:.2f} of the "
              f"grid's best ({best.throughput:.1f}/s)")
    print(f"load average at the start {load[0]:.1f}, at the end {os.getloadavg()[0]:.1f} ({os.cpu_count()} cores)")
    data = {"p99_target_ms": args.p99_ms, "levels": levels.to_json(), "grid_size": size,
            "tune_trials": tune_trials, "tune_max_trials": cap, "tune_seconds": tune_s, "grid_seconds": grid_s,
            "load_average": {"start": load, "end": os.getloadavg()},
            "tune_choice_in_grid": in_grid, "grid_best": best.to_json(), "tune_chosen": outcome.chosen_trial.to_json(),
            "head_to_head": again, "head_to_head_median": {"grid": g, "tune": t, "ratio": t / g if g else None},
            "rounds": [r.to_json() for r in outcome.rounds], "stopped": outcome.stopped,
            "grid": [x.to_json() for x in trials]}
    return finish(f"tune_vs_grid_{args.name}", ["search", "trials", "seconds", "best in search /s", "p50 ms",
                                                  "p99 ms", f"head to head /s (median of {args.rounds})"], rows, data)


def _p(trial: Any, key: str) -> str:
    return f"{getattr(trial.best, key):.0f}" if trial.best is not None else "-"


if __name__ == "__main__":
    sys.exit(main())
