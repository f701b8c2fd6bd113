"""`conch profile` over the five examples (ensembles/*.py, built for the local target): per example and
concurrency, end to end, the critical path, the ensemble scheduler's share, the step that dominates and the
findings; JSON in results/profile_examples.json, and the pictures of one example with --pictures.

    python benchmarks/profile_examples.py                          # builds the examples first (minutes)
    python benchmarks/profile_examples.py --archives dist-local    # archives of `conch build ensembles --target local`
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import ROOT, table, write_json

from conch.archive.manifest import Manifest
from conch.perf.profile.local_servers import profile_archives, sample_bodies
from conch.perf.profile.measure import Load
from conch.perf.profile.pictures import profile_graph, waterfall_png
from conch.perf.profile.profile_report import Profile


def build(out: Path) -> Path:
    subprocess.run([sys.executable, "-m", "conch.cli", "build", str(ROOT / "ensembles"), "--target", "local",
                    "--out", str(out)], check=True)
    return out


def row(p: Profile) -> tuple[object, ...]:
    top = max(p.steps, key=lambda s: s.share)
    return (p.ensemble.removesuffix(".tar.gz"), p.run.concurrency, f"{p.e2e_ms:.1f}", " -> ".join(
        s.split("__")[-1] for s in p.chain), f"{p.path.length_ms:.1f}", f"{p.overhead_ms:.1f}",
        f"{top.model.split('__')[-1]} {top.share:.0%}", f"{top.figures.queue_share:.0%}",
        f"{top.figures.requests_per_execution:.2f}", len(p.all_findings()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--archives", type=Path, help="folder of the examples' local-target archives")
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument("--concurrency", default="1,4", help="comma-separated levels (default 1,4)")
    parser.add_argument("--pictures", type=Path, help="write <example>.profile.svg and .waterfall.png here")
    parser.add_argument("--picture-of", default="text_embeddings", help="the example drawn (default text_embeddings)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="conch-profile-examples-") as tmp:
        folder = args.archives or build(Path(tmp))
        archives = sorted(folder.glob("*.tar.gz"))
        profiles: list[Profile] = []
        for level in (int(c) for c in args.concurrency.split(",")):
            def load_for(manifest: Manifest, level: int = level) -> Load:
                return Load(sample_bodies(manifest), "its samples", args.requests, level)

            profiles += profile_archives(archives, load_for, progress=lambda m: print(m, file=sys.stderr))
    header = ("example", "conc.", "e2e ms", "critical path", "path ms", "sched. ms", "largest step", "its queue",
              "its req/exec", "findings")
    rows = [row(p) for p in sorted(profiles, key=lambda p: (p.ensemble, p.run.concurrency))]
    print(table(header, rows))
    for p in profiles:
        for f in p.all_findings():
            print(f"{p.ensemble} @ {p.run.concurrency}: {f.text()}")
    if args.pictures:
        from conch.diagram import render, to_dot

        args.pictures.mkdir(parents=True, exist_ok=True)
        drawn = [p for p in profiles if p.ensemble == f"{args.picture_of}.tar.gz"]
        for p in drawn[-1:]:  # the highest concurrency
            (args.pictures / f"{args.picture_of}.profile.svg").write_bytes(render(to_dot(profile_graph(p)), "svg"))
            (args.pictures / f"{args.picture_of}.waterfall.png").write_bytes(waterfall_png(p))
            print(f"wrote {args.pictures}/{args.picture_of}.profile.svg and .waterfall.png")
    path = write_json("profile_examples", {"header": header, "rows": rows, "profiles": [p.to_json() for p in profiles]})
    print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
