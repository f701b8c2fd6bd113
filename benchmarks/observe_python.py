"""Issue 39: what running the build's observe runs on the image's Python costs a cold build, A/B alternating in one run.

`conch build ensembles/ --target local` in a new process with an empty cache (CONCH_CACHE_DIR), each round:

- in process: every step of the warmup and shared-memory sizing runs in conch's own process (before: the
  observe runs' Python steps saw conch's Python and every package of its virtualenv);
- image's Python: each Python step runs in a child process on the release's Python (3.10 for 24.10) with the
  image's packages and its packed environment, the image environment built in that empty cache;
- image's Python, image env kept: the same with the image environment already built (it is built once per
  machine and release Python, and the local replay builds and uses the same one).

pip's own download cache is warm in every case (as on a developer's machine). ``--observe-only`` measures
instead the observe run alone of text_embeddings (its two Python steps with their packed environment, and
the encoder's stand-in), warm caches, in this process: the children's start and the pipe, nothing else.

    python benchmarks/observe_python.py [--rounds 3] [--observe-only] [ensembles/]

Writes benchmarks/results/observe_python.json.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, alternate, finish, median

IN_PROCESS, IMAGE, IMAGE_KEPT = "in process", "image's Python", "image's Python, image env kept"


def build_once(arm: str, paths: list[Path], kept: Path) -> float:
    """Seconds of one cold `conch build` of ``paths`` in a new process."""
    with tempfile.TemporaryDirectory(prefix="conch-bench-observe-") as tmp:
        env = {**os.environ, "CONCH_CACHE_DIR": str(Path(tmp) / "cache"),
               "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        env.pop("CONCH_IMAGE_PYTHON_DIR", None)
        if arm == IMAGE_KEPT:
            env["CONCH_IMAGE_PYTHON_DIR"] = str(kept)
        command = [sys.executable, __file__, "--arm", arm, "--out", str(Path(tmp) / "out"), *map(str, paths)]
        start = time.perf_counter()
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{arm}: the build failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return seconds


def build(arm: str, out: str, paths: list[str]) -> int:
    """The child: the CLI's build, with the observe runs in process for the ``in process`` arm."""
    from conch.builder import observe
    from conch.cli import main as cli

    if arm == IN_PROCESS:  # conch's way before: no child Python for any step
        observe.image_python = lambda local: (None, "")  # type: ignore[assignment]
    return int(cli(["build", *paths, "--target", "local", "--out", out]))


def observe_only(rounds: int) -> int:
    """The observe run of text_embeddings, in process against on the image's Python, A/B alternating."""
    sys.path.insert(0, str(ROOT / "ensembles"))
    import text_embeddings

    from conch.builder import observe
    from conch.compiler.compiled import compile_ensemble

    local = compile_ensemble(text_embeddings.text_embeddings, "local", "24.10")
    python, _ = observe.image_python(local)

    def once(child: bool) -> float:
        start = time.perf_counter()
        observe._run(local, True, python if child else None)
        return time.perf_counter() - start

    measured = alternate({IN_PROCESS: lambda: once(False), IMAGE: lambda: once(True)}, rounds)
    rows = [[arm, median(runs), min(runs), max(runs)] for arm, runs in measured.items()]
    return finish("observe_python_run", ("observe run of text_embeddings (s)", "median", "min", "max"), rows,
                  {"runs": measured})


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("paths", nargs="*", type=Path, default=[ROOT / "ensembles"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--observe-only", action="store_true")
    parser.add_argument("--arm", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.arm:
        return build(args.arm, args.out, [str(p) for p in args.paths])
    if args.observe_only:
        return observe_only(args.rounds)
    with tempfile.TemporaryDirectory(prefix="conch-bench-image-env-") as kept:
        build_once(IMAGE_KEPT, args.paths, Path(kept))  # builds the kept image environment, not measured
        cases = {arm: (lambda a=arm: build_once(a, args.paths, Path(kept))) for arm in (IN_PROCESS, IMAGE, IMAGE_KEPT)}
        measured = alternate(cases, args.rounds)
    rows = [[arm, median(runs), min(runs), max(runs)] for arm, runs in measured.items()]
    base = median(measured[IN_PROCESS])
    rows += [[f"{arm} - in process (medians)", median(runs) - base, "", ""]
             for arm, runs in measured.items() if arm != IN_PROCESS]
    return finish("observe_python", ("cold build of the examples (s)", "median", "min", "max"), rows,
                  {"runs": measured, "paths": [str(p.resolve().relative_to(ROOT)) for p in args.paths]})


if __name__ == "__main__":
    sys.exit(main())
