"""Issue 39: what the image's Python and Triton's auto-complete cost the local proof, A/B alternating in one run.

- cold: finding the release's interpreter (probes of pyenv, uv, conda, PATH) and building its environment of
  the image's packages in an empty cache (once per machine, release Python and package list);
- auto-complete: the examples built for the local target (24.10), each round a new server with Triton's
  auto-complete on (SageMaker's serve script) or off (`--disable-auto-complete-config`, conch's old flag):
  server start, every archive's load, and the whole replay;
- interpreter: the same replay on the release's Python 3.10 with the image's packages (GPU-less stand-ins run
  their framework in conch's Python over a pipe) against conch's old way, the stubs on conch's own Python and
  virtualenv (stand-ins in the stub), for the examples without a packed environment (that one is packed for
  3.10 and does not load on conch's Python).

    python benchmarks/image_python.py [--rounds 3] [ensembles/resnet_tensorrt.py ...]

Writes benchmarks/results/image_python.json.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, alternate, finish, median

DEFAULT_EXAMPLES = ("resnet_tensorrt.py", "resnet_pytorch.py", "text_embeddings.py")


def cold() -> dict[str, float]:
    """Seconds to find Python 3.10 (no probe remembered) and to build its image environment in an empty cache."""
    from conch import image_python as ip
    from conch.ensembles.target import Release

    ip.probe.cache_clear()
    start = time.perf_counter()
    interpreter = ip.find_interpreter("3.10")
    found = time.perf_counter() - start
    if interpreter is None:
        raise SystemExit("no Python 3.10 here: nothing to measure")
    with tempfile.TemporaryDirectory(prefix="conch-bench-cache-") as cache:
        packages = tuple(sorted(set(ip.image_requirements(Release.of("24.10")))))  # as the stub's venv
        before = os.environ.get(ip.IMAGE_PYTHON_DIR_ENV)
        os.environ[ip.IMAGE_PYTHON_DIR_ENV] = cache
        try:
            start = time.perf_counter()
            ip.image_environment(interpreter, packages)
            built = time.perf_counter() - start
            start = time.perf_counter()
            ip.image_environment(interpreter, packages)
            again = time.perf_counter() - start
        finally:
            if before is None:
                os.environ.pop(ip.IMAGE_PYTHON_DIR_ENV)
            else:
                os.environ[ip.IMAGE_PYTHON_DIR_ENV] = before
    return {"find 3.10 (s)": found, "image env, cold (s)": built, "image env, cached (s)": again}


def replay_once(archives: list[Path], *, auto_complete: bool = True, old_python: bool = False) -> dict[str, float]:
    """One new server, every archive loaded and replayed: start, summed loads and the whole replay, in seconds."""
    from conch.replays.local_replay import replay_archives
    from conch.triton.server import LocalTriton
    from conch.triton.stub_python import StubPython, host_interpreter, stub_python

    stub = stub_python(["24.10"])
    if old_python:  # conch's Python and its virtualenv, as before issue 39
        stub = StubPython("3.10", ("24.10",), host_interpreter(), Path(sys.prefix))
    server = LocalTriton(stub=stub, auto_complete=auto_complete)
    start = time.perf_counter()
    server.start()
    started = time.perf_counter() - start
    try:
        report = replay_archives(archives, server=server, strict=False)
        whole = time.perf_counter() - start
    finally:
        server.stop()
    failed = [r for r in report.rows if not r.passed]
    if failed:
        raise SystemExit(f"replay failed:\n{report.table()}")
    loads = sum(r.millis for r in report.rows if r.endpoint == "load") / 1000
    return {"start (s)": started, "loads (s)": loads, "start+replay (s)": whole}


def main() -> int:
    from conch.builder.discover import discover
    from conch.builder.repository_build import build_ensemble

    parser = argparse.ArgumentParser()
    parser.add_argument("paths", nargs="*", type=Path,
                        default=[ROOT / "ensembles" / name for name in DEFAULT_EXAMPLES])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    data: dict[str, object] = {"cold": cold()}
    rows: list[list[object]] = [["cold", k, v, "", ""] for k, v in data["cold"].items()]  # type: ignore[union-attr]
    with tempfile.TemporaryDirectory(prefix="conch-bench-") as tmp:
        archives = [build_ensemble(ens, Path(tmp), "local", "24.10") for ens in discover(args.paths)]
        plain = [a for a in archives if not a.name.startswith("text_embeddings")]  # no packed environment

        results: dict[str, dict[str, list[dict[str, float]]]] = {}
        for part, cases in (
            ("auto-complete", {"on (SageMaker)": lambda: replay_once(archives),
                               "off (--disable-auto-complete-config)": lambda: replay_once(archives,
                                                                                           auto_complete=False)}),
            ("interpreter", {"release 3.10, image packages": lambda: replay_once(plain),
                             "conch's 3.11 and venv (before)": lambda: replay_once(plain, old_python=True)}),
        ):
            measured: dict[str, list[dict[str, float]]] = {name: [] for name in cases}

            def case(name: str, run, into: dict[str, list[dict[str, float]]] = measured) -> float:  # type: ignore[no-untyped-def]
                into[name].append(run())
                return 0.0

            alternate({name: (lambda n=name, r=run: case(n, r)) for name, run in cases.items()}, args.rounds)
            results[part] = measured
            for name, runs in measured.items():
                for metric in runs[0]:
                    values = [r[metric] for r in runs]
                    rows.append([part, f"{name}: {metric}", median(values), min(values), max(values)])
        data["runs"] = results
        data["archives"] = [a.name for a in archives]
    return finish("image_python", ("part", "what", "median", "min", "max"), rows, data)


if __name__ == "__main__":
    sys.exit(main())
