"""What "never yesterday's answer" costs (issue 29), A/B in one run: this checkout (A: no ledger, user code run
at every build unless declared pure) against another checkout (B, e.g. main before it), each building its own
`ensembles/` with `--target local`, alternating A and B (the order reversed every other round; medians):

  cold       `conch build ensembles/ --target local` with a new cache and --out (the exported artifacts,
             packed environments and Triton backend folders are linked from the shared cache: they are
             downloads and exports, not this build's work)
  unchanged  the same command again into a warm --out and cache (B answers from its ledger)
  ordinary   B's unchanged build without its ledger (CONCH_BUILD_LEDGER=0): the build B runs when any input
             of the command changed
  replay     `conch replay` of the built archives (one local tritonserver)

    python benchmarks/fresh_answers.py --vs /path/to/other/checkout [--rounds 3] [--rows cold unchanged replay]

Writes benchmarks/results/fresh_answers.json.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from _common import ROOT, alternate, median, table, write_json

ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
SHARED = Path(os.environ.get("CONCH_CACHE_DIR") or Path.home() / ".cache" / "conch")
CPU: dict[str, list[float]] = {}


def timed(label: str, command: list[str], env: dict[str, str], cwd: Path) -> float:
    """Wall seconds of a command; its CPU seconds (children included) go to CPU[label]."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=cwd)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise RuntimeError(f"{label}: {command} failed:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}")
    CPU.setdefault(label, []).append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return elapsed


class Side:
    """One checkout: its conch on PYTHONPATH, its own ensembles/, a warm cache and --out of its own."""

    def __init__(self, name: str, root: Path, tmp: Path) -> None:
        self.name, self.root, self.tmp = name, root, tmp / name
        self.tmp.mkdir()
        self.count = 0
        self.warm_cache = self.fresh_cache()
        self.out = self.tmp / "out"

    def env(self, cache: Path, **extra: str) -> dict[str, str]:
        return {**ENV, "PYTHONPATH": str(self.root), "CONCH_CACHE_DIR": str(cache), **extra}

    def fresh_cache(self) -> Path:
        self.count += 1
        cache = self.tmp / f"cache-{self.count}"
        cache.mkdir()
        for kind in ("artifacts", "envs", "triton-backends", "resolved"):  # downloads and exports
            (SHARED / kind).mkdir(parents=True, exist_ok=True)
            (cache / kind).symlink_to(SHARED / kind)
        return cache

    def build(self, label: str, out: Path, cache: Path, **extra: str) -> float:
        command = [sys.executable, "-m", "conch.cli", "build", "ensembles/", "--target", "local", "--out", str(out)]
        return timed(label, command, self.env(cache, **extra), self.root)

    def cold(self) -> float:
        cache = self.fresh_cache()
        return self.build(f"cold {self.name}", cache / "out", cache)

    def unchanged(self, **extra: str) -> float:
        label = f"{'ordinary' if extra else 'unchanged'} {self.name}"
        return self.build(label, self.out, self.warm_cache, **extra)

    def replay(self) -> float:
        command = [sys.executable, "-m", "conch.cli", "replay", str(self.out)]
        return timed(f"replay {self.name}", command, self.env(self.warm_cache), self.root)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--vs", type=Path, required=True, help="the other checkout (its root)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rows", nargs="*", default=["cold", "unchanged", "replay"])
    args = parser.parse_args()
    load_before = os.getloadavg()
    rows: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory(prefix="conch-bench-fresh-") as tmp:
        a, b = Side("A", ROOT, Path(tmp)), Side("B", args.vs.resolve(), Path(tmp))
        for side in (a, b):  # exports into the shared cache, then the warm --out and cache (not counted)
            side.build("warm-up", side.out, side.warm_cache)
            side.build("warm-up", side.out, side.warm_cache)
        cases: dict[str, dict[str, Callable[[], float]]] = {
            "cold": {"A": a.cold, "B": b.cold},
            "unchanged": {"A": a.unchanged, "B": b.unchanged,
                          "B ordinary": lambda: b.unchanged(CONCH_BUILD_LEDGER="0")},
            "replay": {"A": a.replay, "B": b.replay},
        }
        for row in args.rows:
            samples = alternate(cases[row], args.rounds)
            rows[row] = {"samples": samples,
                         "cpu": {side: CPU.get(f"{'ordinary' if side == 'B ordinary' else row} {side[0]}", [])
                                 for side in samples}}
            print(f"{row}: done", file=sys.stderr, flush=True)
    lines = []
    for row, data in rows.items():
        samples, cpu = data["samples"], data["cpu"]
        assert isinstance(samples, dict) and isinstance(cpu, dict)
        for side in samples:
            if side == "A":
                continue
            lines.append([f"{row}: A vs {side}", f"{median(samples['A']):.2f} s", f"{median(samples[side]):.2f} s",
                          f"{median(samples['A']) / median(samples[side]):.3g}", f"{median(cpu['A']):.2f} s",
                          f"{median(cpu[side]):.2f} s", f"{median(cpu['A']) / median(cpu[side]):.3g}"])
    print(table(["case", "A wall", "B wall", "A/B wall", "A CPU", "B CPU", "A/B CPU"], lines))
    load_after = os.getloadavg()
    print(f"load average: {' '.join(f'{x:.2f}' for x in load_before)} before, "
          f"{' '.join(f'{x:.2f}' for x in load_after)} after; {os.cpu_count()} cores")
    path = write_json("fresh_answers", {"rounds": args.rounds, "a": str(ROOT), "b": str(args.vs),
                                        "load_average": [load_before, load_after], "rows": rows})
    print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
