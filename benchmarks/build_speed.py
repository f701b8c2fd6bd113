"""Build speed, the first three rows of issue 9, each as a ratio measured in one run with A and B
alternating (medians over rounds):

  text   `conch build ensembles/text_embeddings.py` (a new --out each time, so the archive is written)
         vs `tar czf` of the same tree
  many   `conch build` of 200 small ensembles (-j: every core) vs one `tar czf` per tree, in a shell loop
  again  an unchanged rebuild vs a cold build (new --out, no build records, pins or expected outputs
         cached; the exported ONNX file and the packed environment stay in the cache: they are shared
         downloads, not this build's work). The unchanged rebuild imports the ensemble files and builds
         (user code runs again unless declared pure: docs/declare.md); the archive is not rewritten
  examples  the same for every example (`conch build ensembles/ --target local`): the cold build keeps
         only the exported/downloaded artifacts, packed environments and Triton backend folders (and pip's
         own caches); serialized DALI pipelines, bindings, observations, pins, checks and records start empty

    python benchmarks/build_speed.py [text many again examples] [--rounds 3] [--vs OTHER_CHECKOUT]

--vs: the many row also builds with another checkout's conch, alternating with the others (before/after).

Each command runs as users run Python: bytecode caches written and reused (PYTHONDONTWRITEBYTECODE is
dropped for them). Writes benchmarks/results/build_speed.json.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from _common import ROOT, alternate, median, table, write_json

TEXT = ROOT / "ensembles" / "text_embeddings.py"
SMALL = '''import numpy as np
from bench_steps import double

from conch import Ensemble, PythonStep, Tensor


def small(name):
    ens = Ensemble(name, max_batch_size=8)
    first = PythonStep("first", double, inputs=[Tensor("x", "FP32", [4])], outputs=[Tensor("y", "FP32", [4])],
                       max_batch_size=8)
    second = PythonStep("second", double, inputs=[Tensor("x", "FP32", [4])], outputs=[Tensor("y", "FP32", [4])],
                        max_batch_size=8)
    ens.output("Y", second(first(ens.input("X", "FP32", [4]))))
    ens.sample("ones", {"X": np.ones((1, 4), np.float32)}, {"Y": np.full((1, 4), 4, np.float32)})
    return ens


for _i in range(COUNT):
    globals()[f"small_{_i:03d}"] = small(f"small_{_i:03d}")
'''


# Python as users run it: bytecode caches written and reused (a shell with PYTHONDONTWRITEBYTECODE=1
# compiles conch's modules and the ensemble files again in every command, ~0.1 s of CPU each time)
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
INNER: dict[str, list[float]] = {}  # the CLI's own timing of an unchanged build
CPU: dict[str, list[float]] = {}  # CPU seconds (user + system, children included) per case label


def timed(command: list[str], env: dict[str, str] | None = None, cwd: Path | None = None, label: str = "") -> float:
    """Wall seconds of a command; its CPU seconds go to CPU[label] (steadier on a shared machine)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, env=env or ENV, cwd=cwd)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise RuntimeError(f"{command} failed:\n{result.stderr[-3000:]}")
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    CPU.setdefault(label, []).append(cpu)
    inner = re.search(r"\] unchanged .* \(([0-9.]+) s\)", result.stderr)
    if inner:  # the build's own time, without starting Python and importing conch and the ensemble file
        INNER.setdefault(label, []).append(float(inner.group(1)))
    return elapsed


def conch(*args: str | Path) -> list[str]:
    return [sys.executable, "-m", "conch.cli", *map(str, args)]


class Fresh:
    """A new folder name per call, under one temporary folder."""

    def __init__(self, root: Path, prefix: str) -> None:
        self.root, self.prefix, self.count = root, prefix, 0

    def __call__(self) -> Path:
        self.count += 1
        return self.root / f"{self.prefix}{self.count}"


def row_text(tmp: Path, rounds: int) -> dict[str, object]:
    tree = tmp / "tree"
    subprocess.run(conch("build", TEXT, "--out", tmp / "warm", "--repo-dir", tree), check=True, capture_output=True,
                   env=ENV)
    tree = tree / "text_embeddings"
    outs = Fresh(tmp, "text-out-")
    cases: dict[str, Callable[[], float]] = {
        "conch build": lambda: timed(conch("build", TEXT, "--out", outs()), label="text conch"),
        "tar czf": lambda: timed(["tar", "-C", str(tree), "-czf", str(tmp / "by-hand.tar.gz"), "."], label="text tar"),
    }
    samples = alternate(cases, rounds)
    sizes = {"conch_mb": (tmp / "warm" / "text_embeddings.tar.gz").stat().st_size / 1e6,
             "tar_czf_mb": (tmp / "by-hand.tar.gz").stat().st_size / 1e6}
    return {"row": "conch build of text_embeddings vs tar czf of the same tree", "a": "conch build", "b": "tar czf",
            "samples": samples, "ratio": median(samples["conch build"]) / median(samples["tar czf"]),
            "cpu": {"conch build": CPU["text conch"], "tar czf": CPU["text tar"]}, "target": "<= 1.1", **sizes}


def row_many(tmp: Path, rounds: int, count: int, jobs: int, vs: Path | None = None) -> dict[str, object]:
    project = tmp / "many"
    project.mkdir()
    shutil.copy(ROOT / "benchmarks" / "bench_steps.py", project)
    (project / "smalls.py").write_text(SMALL.replace("COUNT", str(count)))
    trees = tmp / "many-trees"
    subprocess.run(conch("build", project, "--out", tmp / "many-warm", "--repo-dir", trees), check=True,
                   capture_output=True, env=ENV)
    loop = f'mkdir -p "$1"; for d in {trees}/*; do tar -C "$d" -czf "$1/$(basename "$d").tar.gz" .; done'
    outs = Fresh(tmp, "many-out-")
    cases: dict[str, Callable[[], float]] = {
        "conch build": lambda: timed(conch("build", project, "--out", outs(), "-j", str(jobs)), label="many conch"),
        "tar czf loop": lambda: timed(["sh", "-c", loop, "sh", str(outs())], label="many tar"),
    }
    if vs is not None:  # the same build by another checkout of conch, in the same alternation (before/after)
        base = {**ENV, "PYTHONPATH": str(vs)}
        cases["conch build (--vs)"] = lambda: timed(conch("build", project, "--out", outs(), "-j", str(jobs)), base,
                                                    cwd=tmp, label="many vs")
    load = os.getloadavg()
    samples = alternate(cases, rounds)
    row = {"row": f"{count} small ensembles vs one tar czf per tree", "jobs": jobs, "samples": samples,
           "ratio": median(samples["conch build"]) / median(samples["tar czf loop"]),
           "cpu": {"conch build": CPU["many conch"], "tar czf loop": CPU["many tar"]}, "target": "<= 0.6",
           "load_average": [load, os.getloadavg()]}
    if vs is not None:
        before = samples.pop("conch build (--vs)")
        row["vs"] = {"checkout": str(vs), "samples": before, "cpu": CPU["many vs"],
                     "wall_this_over_vs": median(samples["conch build"]) / median(before),
                     "cpu_this_over_vs": median(CPU["many conch"]) / median(CPU["many vs"])}
    return row


def row_again(tmp: Path, rounds: int, what: Path = TEXT, *flags: str) -> dict[str, object]:
    shared = Path(os.environ.get("CONCH_CACHE_DIR") or Path.home() / ".cache" / "conch")
    out = tmp / "again-out"
    subprocess.run(conch("build", what, "--out", out, *flags), check=True, capture_output=True, env=ENV)
    colds = Fresh(tmp, "cold-")

    def cold() -> float:
        cache = colds()
        cache.mkdir()
        for kind in ("artifacts", "envs", "triton-backends"):  # downloads and exports, not this build's work
            if (shared / kind).exists():
                (cache / kind).symlink_to(shared / kind)
        return timed(conch("build", what, "--out", cache / "out", *flags),
                     env={**ENV, "CONCH_CACHE_DIR": str(cache)}, label="cold")

    command = conch("build", what, "--out", out, *flags)
    timed(command, label="warm")
    cases: dict[str, Callable[[], float]] = {
        "unchanged rebuild": lambda: timed(command, label="unchanged"),
        "cold build": cold,
    }
    for timings in (CPU, INNER):  # a second row of this kind starts its own lists
        timings.pop("unchanged", None)
    CPU.pop("cold", None)
    samples = alternate(cases, rounds)
    row = "unchanged rebuild vs cold build" + ("" if what == TEXT else f" of {what.name}/ {' '.join(flags)}")
    return {"row": row, "samples": samples,
            "speedup": median(samples["cold build"]) / median(samples["unchanged rebuild"]),
            "cpu": {"unchanged rebuild": CPU["unchanged"], "cold build": CPU["cold"]},
            "load_average": os.getloadavg(), "unchanged_build_itself_s": INNER.get("unchanged", []),
            "target": "none (correctness first: issue 29)"}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("rows", nargs="*", default=["text", "many", "again"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--vs", type=Path, help="many: also build with the conch of this checkout (its root, put on "
                        "PYTHONPATH), alternating with the others: before/after in one run")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="conch-bench-build-") as tmp:
        for row in args.rows:
            folder = Path(tmp) / row
            folder.mkdir()
            if row == "text":
                results.append(row_text(folder, args.rounds))
            elif row == "many":
                results.append(row_many(folder, args.rounds, args.count, args.jobs, args.vs and args.vs.resolve()))
            elif row == "examples":
                results.append(row_again(folder, args.rounds, ROOT / "ensembles", "--target", "local"))
            else:
                results.append(row_again(folder, args.rounds))
            print(f"{results[-1]['row']}: done", file=sys.stderr, flush=True)
    lines = []
    for r in results:
        samples = r["samples"]
        assert isinstance(samples, dict)
        a, b = list(samples)[:2]
        ratio = r.get("ratio", r.get("speedup"))
        cpu = r["cpu"]
        assert isinstance(cpu, dict)
        cpu_a, cpu_b = median(cpu[a]), median(cpu[b])
        cpu_ratio = cpu_b / cpu_a if "speedup" in r else cpu_a / cpu_b
        lines.append([r["row"], f"{median(samples[a]):.3f} s", f"{median(samples[b]):.3f} s", f"{ratio:.3g}",
                      f"{cpu_a:.3f} s", f"{cpu_b:.3f} s", f"{cpu_ratio:.3g}", r["target"]])
    print(table(["row", "A wall", "B wall", "A/B (again: B/A)", "A CPU", "B CPU", "same by CPU", "target"], lines))
    for r in results:
        load = r.get("load_average")
        if isinstance(load, list):
            print(f"{r['row']}: load average {load[0]} before, {load[1]} after")
        vs = r.get("vs")
        if isinstance(vs, dict):
            print(f"{r['row']}: --vs {vs['checkout']}: {median(vs['samples']):.3f} s wall, {median(vs['cpu']):.3f} s "
                  f"CPU; this checkout over it: {vs['wall_this_over_vs']:.3g} by wall, {vs['cpu_this_over_vs']:.3g} "
                  "by CPU")
        if r.get("unchanged_build_itself_s"):
            itself = median(r["unchanged_build_itself_s"])  # type: ignore[arg-type]
            cold = median(r["samples"]["cold build"])  # type: ignore[index]
            print(f"{r['row']}: the unchanged build itself (no interpreter start, no imports): {itself:.3f} s; "
                  f"cold/itself {cold / itself:.0f}x")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    path = write_json("build_speed", {"rounds": args.rounds, "rows": results})
    print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
