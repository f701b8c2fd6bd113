"""`conch replay` of one small archive, this checkout (A) against an earlier commit (B), alternating in one run:
what the stop of its tritonserver costs a user (issue 40: a client left open held the server for its 5-s exit
timeout, and the stop waited for the server's once-a-second check of live models).

    python benchmarks/server_stop.py [--base 32c059a] [--rounds 6]

B runs from a git worktree of ``--base`` made in a temporary folder (its own ``conch``, this venv's packages).
Prints a table of the medians and the A/B ratio, and writes benchmarks/results/server_stop.json.
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

FIXTURES = ROOT / "tests" / "fixtures"


def replay(checkout: Path, dist: Path) -> float:
    """Seconds of one `conch replay` of ``dist`` with ``checkout``'s conch, start to exit."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(checkout), str(FIXTURES)])}
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "conch.cli", "replay", str(dist), "--endpoint", "kserve",
                           "--quiet"], env=env, cwd=dist, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"replay with {checkout} failed: {done.stderr[-2000:]}")
    return time.monotonic() - start


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", default="32c059a", help="the commit B runs (default: before issue 40's stop)")
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="conch-stop-") as tmp:
        base = Path(tmp) / "base"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(base), args.base], check=True)
        try:
            dist = Path(tmp) / "dist"
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(FIXTURES)])}
            source = FIXTURES / "cli_ensembles" / "pipelines.py"
            subprocess.run([sys.executable, "-m", "conch.cli", "build", str(source), "--out", str(dist), "--target",
                            "local", "--quiet"], env=env, check=True)
            samples = alternate({"A (this checkout)": lambda: replay(ROOT, dist),
                                 f"B ({args.base})": lambda: replay(base, dist)}, args.rounds)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)], check=False)
    (a, a_s), (b, b_s) = samples.items()
    ratios = [x / y for x, y in zip(a_s, b_s, strict=True)]
    rows = [[a, median(a_s), min(a_s), max(a_s)], [b, median(b_s), min(b_s), max(b_s)],
            ["A/B (pair by pair)", median(ratios), min(ratios), max(ratios)]]
    return finish("server_stop", ["conch replay of cli_linear (s)", "median", "min", "max"], rows,
                  {"base": args.base, "rounds": args.rounds, "seconds": samples, "ratios": ratios})


if __name__ == "__main__":
    sys.exit(main())
