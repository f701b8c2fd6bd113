"""Many copies of one archive behind the local MME: cold-load latency, warm latency through the front against
Triton's own SageMaker port (A/B, alternating), reloads from the disk cache, and memory per loaded copy.
Prints a table, writes benchmarks/results/local_mme.json.

    python benchmarks/local_mme.py [--archive dist/x.tar.gz | --ensemble ensembles/x.py --only x | --distinct]
                                   [--copies 20] [--warm 200] [--reloads 20] [--step-names isolate|shared]
                                   [--churn 150 --churn-slots 10]
    python benchmarks/local_mme.py --overhead --copies 1 --warm 300          # the front's own overhead
    python benchmarks/local_mme.py --ab BASE [OTHER] --ab-rounds 3 --warm 300  # two commits' fronts, A/B

Default archive: the CLI tests' two-Python-step ensemble (cli_linear), built for the local target, copied
under N names (seed 000's pattern). --distinct builds N ensembles of the same shape with names (and so step
folder names) of their own, which Triton's namespacing does not tie together. The default --step-names shared
keeps every copy's step names, as SageMaker's image does (each copy after the first is a collision);
--step-names isolate gives each copy step names of its own, as `conch deploy` uploads copies. --churn N ends
with N calls in random order from 4 threads at --churn-slots loaded: loads and unloads done, failed calls, how
often Triton answered 'unknown model' for a loaded copy (its lookup race; passed on, never retried), and how
often tritonserver exited and was restarted (copies sharing step names crash Triton 2.51).
--ab runs --overhead with the conch package of commit BASE and of OTHER (default: this checkout as it is)
alternately, --ab-rounds times each, each in a process of its own on the same archive, and prints each
run's figures with the load average before it and the medians of each side.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_ENSEMBLE = ROOT / "tests" / "fixtures" / "cli_ensembles" / "pipelines.py"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def build(args: argparse.Namespace, out: Path) -> Path:
    from conch.builder.discover import discover
    from conch.builder.repository_build import build_ensemble

    if args.archive:
        return Path(args.archive)
    sys.path.insert(0, str(ROOT / "tests" / "fixtures"))  # the default ensemble's step code
    ensembles = [e for e in discover([args.ensemble]) if not args.only or e.name == args.only]
    return build_ensemble(ensembles[0], out, "local")


def distinct(i: int, out: Path) -> Path:
    """The tests' two-step ensemble under a name of its own, so its step folders are its own too."""
    from conch.builder.repository_build import build_ensemble

    sys.path.insert(0, str(ROOT / "tests"))
    from conftest import linear_ensemble  # type: ignore[import-not-found]

    return build_ensemble(linear_ensemble(f"bench{i:03d}"), out, "local")


def timed(call: Any) -> float:
    start = time.perf_counter()
    call()
    return (time.perf_counter() - start) * 1000


def main() -> int:
    import httpx
    from botocore.config import Config

    from conch.endpoint import LocalMME
    from conch.sagemaker.runtime import archive_manifest
    from conch.triton.mme_contract import model_hash
    from conch.wire import TARGET_HEADER, binary_request, json_request

    parser = argparse.ArgumentParser()
    parser.add_argument("--archive", type=Path)
    parser.add_argument("--ensemble", type=Path, default=DEFAULT_ENSEMBLE)
    parser.add_argument("--only", default="cli_linear")
    parser.add_argument("--copies", type=int, default=20)
    parser.add_argument("--warm", type=int, default=200, help="warm requests per side of the A/B")
    parser.add_argument("--reloads", type=int, default=20)
    parser.add_argument("--distinct", action="store_true",
                        help="N distinct two-step ensembles (own step names) instead of N copies of one archive")
    parser.add_argument("--step-names", choices=["isolate", "shared"], default="shared")
    parser.add_argument("--churn", type=int, default=0, help="calls in random order at --churn-slots loaded")
    parser.add_argument("--churn-slots", type=int, default=10)
    parser.add_argument("--overhead", action="store_true",
                        help="only the front's overhead: warm calls straight vs via the front (conc. 1; 32 with wrk)")
    parser.add_argument("--ab", nargs="+", metavar="COMMIT",
                        help="compare the front of commit BASE with OTHER's (default: this checkout), alternating")
    parser.add_argument("--ab-rounds", type=int, default=3)
    parser.add_argument("--profile-front", type=int, default=0, metavar="SECONDS",
                        help="with --overhead: cProfile the front's event loop thread under wrk (32 connections)")
    parser.add_argument("--json-out", type=Path, help="where the rows go (default: benchmarks/results/...)")
    args = parser.parse_args()
    if args.ab:
        return ab(args)

    rows: list[dict[str, Any]] = []

    def row(metric: str, value: float, unit: str) -> None:
        rows.append({"metric": metric, "value": round(value, 2), "unit": unit})

    with tempfile.TemporaryDirectory() as tmp:
        archive = build(args, Path(tmp) / "built")
        inputs = archive_manifest(archive).samples[0].input_arrays()
        body, content_type = json_request(inputs)
        binary_body, binary_type = binary_request(inputs)
        source = Path(tmp) / "source"
        source.mkdir()
        names = [f"copy-{i:03d}.tar.gz" for i in range(args.copies)]
        for i, name in enumerate(names):
            shutil.copyfile(distinct(i, Path(tmp) / "distinct") if args.distinct else archive, source / name)
        config = Config(retries={"total_max_attempts": 1}, read_timeout=600)

        with LocalMME(source, step_names=args.step_names) as mme:
            rt = client(mme.url, config)

            def invoke(name: str, data: bytes = body, kind: str = content_type) -> None:
                rt.invoke_endpoint(EndpointName="local", TargetModel=name, ContentType=kind, Body=data)["Body"].read()

            empty = mme.metrics_json()["MemoryUsedBytes"]
            cold = [timed(lambda n=name: invoke(n)) for name in names]  # type: ignore[misc]
            loaded = mme.metrics_json()
            row("cold first call p50 (download + load + answer)", statistics.median(cold), "ms")
            row("cold first call p90", percentile(cold, 0.9), "ms")
            row("Triton load p50 (ModelLoadingTime)", loaded["ModelLoadingTime"]["p50_s"] * 1000, "ms")
            row("download + unpack p50 (ModelDownloadingTime)", loaded["ModelDownloadingTime"]["p50_s"] * 1000, "ms")
            row("memory, server with no model (PSS)", empty / 2**20, "MiB")
            row(f"memory per loaded copy (PSS, mean of {args.copies})",
                (loaded["MemoryUsedBytes"] - empty) / args.copies / 2**20, "MiB")

            direct = httpx.Client(base_url=mme.triton.sagemaker_url, timeout=60)
            via_front = httpx.Client(base_url=mme.url, timeout=60)
            target = names[0]
            headers = {TARGET_HEADER: target, "Content-Type": content_type}
            sides: dict[str, Any] = {
                "via the front, boto3, JSON": lambda: invoke(target),
                "via the front, boto3, binary+json": lambda: invoke(target, binary_body, binary_type),
                "via the front, httpx, JSON": lambda: via_front.post(
                    "/endpoints/local/invocations", content=body, headers=headers).raise_for_status(),
                "straight to Triton's SageMaker port, httpx, JSON": lambda: direct.post(
                    f"/models/{model_hash(target)}/invoke", content=body, headers=headers).raise_for_status(),
            }
            warm: dict[str, list[float]] = {side: [] for side in sides}
            for _ in range(args.warm):  # alternating, so drift on a shared machine hits every side alike
                for side, call in sides.items():
                    warm[side].append(timed(call))
            direct.close()
            via_front.close()
            for side, latencies in warm.items():
                row(f"warm p50 {side}", statistics.median(latencies), "ms")
            row("warm p90 via the front, boto3, JSON", percentile(warm["via the front, boto3, JSON"], 0.9), "ms")
            front_overhead(mme, target, body, content_type, warm, row)
            if args.profile_front:
                profile_front(mme, target, body, content_type, args.profile_front)
        if args.overhead:
            rows_out(args, archive, rows)
            return 0

        with LocalMME(source, max_loaded=2, step_names=args.step_names) as mme:
            rt = client(mme.url, config)
            cycle = names[:3]
            for name in cycle:
                invoke(name)
            reloads = [timed(lambda n=cycle[i % 3]: invoke(n)) for i in range(args.reloads)]  # type: ignore[misc]
            after = mme.metrics_json()
            row("reload p50 with max-loaded 2 (unload LRU + load from disk + answer)",
                statistics.median(reloads), "ms")
            row("Triton unload p50 (ModelUnloadingTime)", after["ModelUnloadingTime"]["p50_s"] * 1000, "ms")
        if args.churn:
            churn(args, source, names, row, config)
    rows_out(args, archive, rows)
    return 0


def front_overhead(mme: Any, target: str, body: bytes, content_type: str, warm: dict[str, list[float]],
                   row: Any) -> None:
    """What the front adds to a warm call: at concurrency 1 from the alternating httpx sides above; at 32
    from wrk (a C client, when installed) against each, alternating, with the front process's CPU per call."""
    import os

    from _common import wrk_latency, wrk_run

    from conch.triton.mme_contract import model_hash
    from conch.wire import TARGET_HEADER

    direct = statistics.median(warm["straight to Triton's SageMaker port, httpx, JSON"])
    row("front's added p50 at concurrency 1 (httpx via the front - straight)",
        statistics.median(warm["via the front, httpx, JSON"]) - direct, "ms")
    if shutil.which("wrk") is None:
        return
    urls = {"front": f"{mme.url}/endpoints/local/invocations",
            "direct": f"{mme.triton.sagemaker_url}/models/{model_hash(target)}/invoke"}
    # the same at concurrency 1 from a client in a process of its own (wrk), as callers of `conch serve` are: the
    # httpx client above runs in this process beside the front's thread and shares its GIL
    p50s: dict[str, list[float]] = {"front": [], "direct": []}
    for index in range(5):
        for side in ("front", "direct") if index % 2 == 0 else ("direct", "front"):
            p50s[side].append(wrk_latency(urls[side], body, content_type, 1, 2, {TARGET_HEADER: target})[2])
    row("wrk, 1 connection: p50 straight to Triton", statistics.median(p50s["direct"]), "ms")
    row("front's added p50 at concurrency 1 (wrk via the front - straight)",
        statistics.median(p50s["front"]) - statistics.median(p50s["direct"]), "ms")
    rates: dict[str, list[float]] = {"front": [], "direct": []}
    front_cpu: list[float] = []
    front_system: list[float] = []
    for index in range(5):
        for side in ("front", "direct") if index % 2 == 0 else ("direct", "front"):
            before = os.times()  # this process: the front's thread (the main thread waits for wrk)
            rate, count = wrk_run(urls[side], body, content_type, 32, 2, {TARGET_HEADER: target})
            if side == "front":
                after = os.times()
                front_cpu.append((after.user + after.system - before.user - before.system) / count)
                front_system.append((after.system - before.system) / count)  # the kernel's: sockets, epoll
            rates[side].append(rate)
    front, straight = statistics.median(rates["front"]), statistics.median(rates["direct"])
    row("wrk, 32 connections: req/s straight to Triton", straight, "req/s")
    row("wrk, 32 connections: req/s via the front", front, "req/s")
    row("front's added time at concurrency 32, % of Triton's (straight/front - 1)", (straight / front - 1) * 100, "%")
    row("front process CPU per call at concurrency 32", statistics.median(front_cpu) * 1e6, "us")
    row("of which system (kernel) CPU per call at concurrency 32", statistics.median(front_system) * 1e6, "us")


def profile_front(mme: Any, target: str, body: bytes, content_type: str, seconds: int) -> None:
    """cProfile of the front's event loop thread (where every request is answered) under wrk, 32 connections, in
    CPU time of that thread (a socket write's time includes the kernel's loopback delivery to the reader)."""
    import cProfile
    import pstats
    import threading

    from _common import wrk_run

    from conch.wire import TARGET_HEADER

    profiler = cProfile.Profile(time.thread_time)  # CPU of the loop's thread, not waits for the cores or the kernel
    switched = threading.Event()

    def switch(on: bool) -> None:
        profiler.enable() if on else profiler.disable()
        switched.set()

    for on in (True, False):
        switched.clear()
        mme._loop.call_soon_threadsafe(switch, on)
        switched.wait(10)
        if on:
            rate, count = wrk_run(f"{mme.url}/endpoints/local/invocations", body, content_type, 32, seconds,
                                  {TARGET_HEADER: target})
    print(f"front's event loop: {type(mme._loop).__module__}.{type(mme._loop).__name__}")
    print(f"front under cProfile: {rate:.0f} req/s, {count} calls, {profiler_cpu(profiler) / count * 1e6:.0f} us "
          "of the loop thread's CPU per call")
    stats = pstats.Stats(profiler)
    areas: dict[str, float] = {}
    for (path, _, function), (_, _, own, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        areas[_area(path, function)] = areas.get(_area(path, function), 0.0) + own
    total = sum(areas.values()) or 1.0
    print("the loop thread's CPU by where it was spent (own time of each function):")
    for area, own in sorted(areas.items(), key=lambda item: -item[1]):
        print(f"  {area:<58} {own / total * 100:5.1f} %  {own / count * 1e6:6.1f} us per call")
    stats.sort_stats("tottime").print_stats(30)


def _area(path: str, function: str) -> str:
    """Which part of the front a profiled function belongs to."""
    for marker, area in (("uvicorn", "uvicorn (server side: parsing, scope, send)"),
                         ("endpoint/hop.py", "conch: the hop (hop.py)"),
                         ("aiohttp", "aiohttp (the hop's client and pool)"),
                         ("yarl", "yarl and multidict (aiohttp's URLs and headers)"),
                         ("multidict", "yarl and multidict (aiohttp's URLs and headers)"),
                         ("endpoint/", "conch: the handler, fleet, metrics (app.py, fleet.py, metrics.py)"),
                         ("prometheus_client", "prometheus_client"), ("asyncio", "asyncio (tasks, futures, locks)")):
        if marker in path:
            return area
    if path == "~":  # built-ins and C methods: socket calls, the parser, the loop's own
        if any(word in function for word in ("write", "send", "recv", "poll")):
            return "socket calls (write, writev, poll), in C"
        return "other built-ins (the loop, httptools, bytes, dict)"
    return "other Python"


def profiler_cpu(profiler: Any) -> float:
    import pstats

    return float(pstats.Stats(profiler).total_tt)  # type: ignore[attr-defined]


def rows_out(args: argparse.Namespace, archive: Path, rows: list[dict[str, Any]]) -> None:
    width = max(len(r["metric"]) for r in rows)
    print(f"{'metric':<{width}}  {'value':>9}  unit")
    for r in rows:
        print(f"{r['metric']:<{width}}  {r['value']:>9}  {r['unit']}")
    suffix = ("_distinct" if args.distinct else "") + ("_isolate" if args.step_names == "isolate" else "") + (
        "_overhead" if args.overhead else "")
    out = args.json_out or ROOT / "benchmarks" / "results" / f"local_mme{suffix}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"python": sys.version.split()[0], "machine": platform.machine(), "cpus": _cpus(), "archive": archive.name,
            "copies": args.copies, "warm": args.warm, "reloads": args.reloads, "distinct": args.distinct,
            "step_names": args.step_names, "churn": args.churn, "churn_slots": args.churn_slots}
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    print(f"wrote {out}")


AB_METRICS = {  # the --overhead rows an A/B compares, by a short name
    "straight p50, c=1 (ms)": "warm p50 straight to Triton's SageMaker port, httpx, JSON",
    "added p50, c=1 (ms)": "front's added p50 at concurrency 1 (httpx via the front - straight)",
    "wrk p50 straight, c=1 (ms)": "wrk, 1 connection: p50 straight to Triton",
    "added p50, c=1, wrk (ms)": "front's added p50 at concurrency 1 (wrk via the front - straight)",
    "added at 32, % of Triton's": "front's added time at concurrency 32, % of Triton's (straight/front - 1)",
    "front CPU per call at 32 (us)": "front process CPU per call at concurrency 32",
    "of which kernel (us)": "of which system (kernel) CPU per call at concurrency 32",
    "req/s at 32, straight": "wrk, 32 connections: req/s straight to Triton",
    "req/s at 32, via the front": "wrk, 32 connections: req/s via the front",
}


def ab(args: argparse.Namespace) -> int:
    """--overhead with two commits' conch packages, alternating, on one archive built by this checkout."""
    import os
    import subprocess

    if len(args.ab) > 2:
        raise SystemExit("--ab takes one or two commits: BASE [OTHER]")
    results: dict[str, list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        archive = build(args, Path(tmp) / "built")
        trees: dict[str, Path] = {}
        for commit in args.ab:
            tree = Path(tmp) / f"tree-{len(trees)}"
            tree.mkdir()
            tar = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "conch"], check=True,
                                 capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", str(tree)], input=tar, check=True)
            trees[commit] = tree
        if len(trees) == 1:
            trees["this checkout"] = ROOT
        sides = list(trees)
        results = {side: [] for side in sides}
        for index in range(args.ab_rounds):
            for side in sides if index % 2 == 0 else reversed(sides):
                out = Path(tmp) / "rows.json"
                load = os.getloadavg()[0]
                env = {**os.environ, "PYTHONPATH": str(trees[side])}
                subprocess.run([sys.executable, __file__, "--overhead", "--copies", "1", "--warm", str(args.warm),
                                "--archive", str(archive), "--json-out", str(out)], env=env, check=True,
                               stdout=subprocess.DEVNULL)
                rows = {r["metric"]: r["value"] for r in json.loads(out.read_text())["rows"]}
                figures = {short: rows.get(long, float("nan")) for short, long in AB_METRICS.items()}
                figures["load average (1 min) before"] = round(load, 2)
                results[side].append(figures)
                print(f"round {index + 1}, {side}: " + ", ".join(f"{k} {v}" for k, v in figures.items()), flush=True)
    print()
    print(f"{'median of ' + str(args.ab_rounds) + ' runs':<34}" + "".join(f"{side[:12]:>16}" for side in sides))
    for metric in [*AB_METRICS, "load average (1 min) before"]:
        print(f"{metric:<34}" + "".join(f"{statistics.median(r[metric] for r in results[side]):>16.2f}"
                                          for side in sides))
    out = ROOT / "benchmarks" / "results" / "local_mme_ab.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"meta": {"commits": sides, "warm": args.warm, "rounds": args.ab_rounds,
                                        "cpus": _cpus()}, "runs": results}, indent=1) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")
    return 0


def client(url: str, config: Any) -> Any:
    import boto3

    return boto3.client("sagemaker-runtime", endpoint_url=url, region_name="us-east-1", aws_access_key_id="x",
                        aws_secret_access_key="x", config=config)


def churn(args: argparse.Namespace, source: Path, names: list[str], row: Any, config: Any) -> None:
    """Every name at least once, then random ones, from 4 threads, with few slots: loads, unloads, restarts."""
    import random
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from conch.endpoint import LocalMME
    from conch.sagemaker.runtime import archive_manifest
    from conch.triton.mme import json_request

    inputs = archive_manifest(source / names[0]).samples[0].input_arrays()
    body, content_type = json_request(inputs)
    order = names + random.Random(7).choices(names, k=max(0, args.churn - len(names)))
    random.Random(11).shuffle(order)
    failed = []
    with LocalMME(source, max_loaded=args.churn_slots, step_names=args.step_names) as mme:
        local = threading.local()

        def call(name: str) -> None:
            if not hasattr(local, "rt"):
                local.rt = client(mme.url, config)
            try:
                local.rt.invoke_endpoint(EndpointName="local", TargetModel=name, ContentType=content_type,
                                         Body=body)["Body"].read()
            except Exception as exc:  # a crash or Triton's lookup race answers errors; count them, carry on
                failed.append(repr(exc))

        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=4) as pool:
            list(pool.map(call, order))
        seconds = time.perf_counter() - start
        metrics = mme.metrics_json()
    loads = metrics["ModelLoads"]["cold"] + metrics["ModelLoads"]["reload"]
    row(f"churn: {len(order)} calls, {args.churn_slots} slots, 4 threads", seconds, "s")
    row("churn: loads", loads, "count")
    row("churn: unloads", sum(metrics["ModelUnloads"].values()), "count")
    row("churn: failed calls", len(failed), "count")
    row("churn: of which 'unknown model' for a loaded copy (Triton's lookup race)", metrics["TritonLookupMisses"],
        "count")
    row("churn: tritonserver restarts (it exited)", metrics["TritonRestarts"], "count")
    row("churn: step name collisions (copies sharing step names)", metrics["StepNameCollisions"], "count")


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0))


if __name__ == "__main__":
    sys.exit(main())
