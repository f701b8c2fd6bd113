"""Issue 41: what running tritonserver in a network namespace of its own costs, against running it on the host.
A/B in one run, alternating: "host" (CONCH_UNSHARE names a missing command: conch starts tritonserver as where
the platform refuses namespaces, its SageMaker port on every interface) and "netns" (the default: the server in
its namespace, reached through the launcher's forwarder on the host's 127.0.0.1).

- warm call through the local MME's front (httpx, KServe JSON body, the sample of the tests' two-Python-step
  ensemble), and the same call straight to Triton's SageMaker port (the forwarder's hop alone), and a call with
  a 4 MiB JSON body straight to the port (bytes through the hop);
- the launcher's CPU time over those calls (what the hop costs whatever the machine's load);
- a replay: `replay_archives` of that archive, with its own server (start, load, every endpoint, stop).

Prints a table of medians and the ratio netns / host, writes benchmarks/results/netns_hop.json.

    python benchmarks/netns_hop.py [--rounds 5] [--calls 100] [--replays 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from _common import alternate, finish

ROOT = Path(__file__).resolve().parent.parent
ENSEMBLE = ROOT / "tests" / "fixtures" / "cli_ensembles" / "pipelines.py"
SIDES = ("host", "netns")
BIG = 4 * 2**20


@contextmanager
def side(name: str) -> Iterator[None]:
    """The environment LocalTriton reads at start for one side of the A/B."""
    from conch.triton.network_namespace import ALLOW_EXPOSED_ENV, UNSHARE_ENV

    saved = {k: os.environ.get(k) for k in (UNSHARE_ENV, ALLOW_EXPOSED_ENV)}
    if name == "host":
        os.environ[UNSHARE_ENV], os.environ[ALLOW_EXPOSED_ENV] = "/nonexistent/unshare", "1"
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def build(out: Path) -> Path:
    from conch.builder.discover import discover
    from conch.builder.repository_build import build_ensemble

    sys.path.insert(0, str(ROOT / "tests" / "fixtures"))  # the ensemble's step code
    (ensemble,) = [e for e in discover([ENSEMBLE]) if e.name == "cli_linear"]
    return build_ensemble(ensemble, out, "local")


counted: dict[str, int] = {}  # calls made per kind of the netns side, after the warm-up
hop_cpu: dict[str, float] = {}  # the launcher's CPU time (user + system, ms) over them
launchers: list[Any] = []  # the netns side's launcher (psutil.Process), once the warm-up is done


def median_ms(call: Callable[[], Any], calls: int, kind: str = "") -> float:
    watched = launchers[0] if launchers and kind.endswith("netns") else None
    before = sum(watched.cpu_times()[:2]) if watched else 0.0
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1000)
    if watched:
        counted[kind] = counted.get(kind, 0) + calls
        hop_cpu[kind] = hop_cpu.get(kind, 0.0) + (sum(watched.cpu_times()[:2]) - before) * 1000
    return statistics.median(times)


def main() -> int:
    import httpx
    import psutil

    from conch.endpoint import LocalMME
    from conch.replays.local_replay import replay_archives
    from conch.sagemaker.runtime import archive_manifest
    from conch.triton.mme_contract import model_hash
    from conch.triton.network_namespace import refused
    from conch.wire import TARGET_HEADER, json_request

    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds of warm calls")
    parser.add_argument("--calls", type=int, default=100, help="calls per round and side (their median is kept)")
    parser.add_argument("--replays", type=int, default=5, help="replays per side, alternating")
    args = parser.parse_args()
    if refused():
        raise SystemExit(f"this machine refuses network namespaces: {refused()}")

    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "source"
        archive = build(source)
        body, content_type = json_request(archive_manifest(archive).samples[0].input_arrays())
        target = archive.name
        headers = {TARGET_HEADER: target, "Content-Type": content_type}
        big = body + b" " * BIG  # the sample's JSON and 4 MiB of whitespace, which Triton parses past
        mmes, clients = {}, []
        for name in SIDES:
            with side(name):
                mmes[name] = LocalMME(source).start()
            mmes[name].load(target)
        try:
            cases: dict[str, Callable[[], float]] = {}
            for name, mme in mmes.items():
                front = httpx.Client(base_url=mme.url, timeout=60)
                straight = httpx.Client(base_url=mme.triton.sagemaker_url, timeout=60)
                clients += [front, straight]
                invoke = f"/models/{model_hash(target)}/invoke"

                def via_front(c: httpx.Client = front, name: str = name) -> float:
                    return median_ms(lambda: c.post("/endpoints/local/invocations", content=body,
                                                    headers=headers).raise_for_status(), args.calls, f"small {name}")

                def to_triton(c: httpx.Client = straight, path: str = invoke, name: str = name) -> float:
                    return median_ms(lambda: c.post(path, content=body, headers=headers).raise_for_status(),
                                     args.calls, f"small {name}")

                def big_body(c: httpx.Client = straight, path: str = invoke, name: str = name) -> float:
                    return median_ms(lambda: c.post(path, content=big, headers=headers).raise_for_status(),
                                     max(args.calls // 10, 3), f"big {name}")

                cases[f"warm call via the MME front ({name})"] = via_front
                cases[f"warm call straight to Triton's SageMaker port ({name})"] = to_triton
                cases[f"4 MiB JSON body straight to Triton's SageMaker port ({name})"] = big_body
            for case in cases.values():
                case()  # warm-up: connections made, the first calls' costs paid
            launchers.append(psutil.Process(mmes["netns"].triton.process.pid))  # type: ignore[union-attr]
            warm = alternate(cases, args.rounds)
        finally:
            for c in clients:
                c.close()
            for mme in mmes.values():
                mme.stop()

        def replay(name: str) -> Callable[[], float]:
            def run() -> float:
                with side(name):
                    start = time.perf_counter()
                    report = replay_archives([archive])
                    took = (time.perf_counter() - start) * 1000
                assert report.passed, report.table()
                return took
            return run

        replays = alternate({f"replay, its own server ({name})": replay(name) for name in SIDES}, args.replays)

    samples = {**warm, **replays}
    for kind, calls in counted.items():
        print(f"the launcher's CPU (user + system) per {kind.split()[0]} call through it: "
              f"{hop_cpu[kind] / calls:.3f} ms ({calls} calls)")
    rows = []
    for what in dict.fromkeys(k.rsplit(" (", 1)[0] for k, v in samples.items() if v):
        host, netns = (statistics.median(samples[f"{what} ({s})"]) for s in SIDES)
        rows.append([what, host, netns, netns - host, netns / host])
    return finish("netns_hop", ["case (median ms)", "host", "netns", "netns - host", "netns / host"], rows,
                  {"samples_ms": samples, "rows": [dict(zip(["case", "host_ms", "netns_ms", "added_ms", "ratio"], r,
                                                            strict=True)) for r in rows],
                   "rounds": args.rounds, "calls": args.calls, "replays": args.replays,
                   "load_average": os.getloadavg(), "launcher_cpu_ms": hop_cpu, "launcher_calls": counted})


if __name__ == "__main__":
    sys.exit(main())
