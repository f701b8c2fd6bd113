"""`conch bench`: seed 003's load study as a command: a load test over a ramp of users against a local MME, a
local Triton or an endpoint, or (`--probe`) how many copies of an archive fit a memory budget."""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from conch.cli.console import bars_shown, document, error, say
from conch.cli.console import result as shown
from conch.cli.discovery import bench_archives
from conch.cli.flags import Subcommands, add_python_flags, add_step_names, size
from conch.cli.profiling import bench_profiler, bench_profiles
from conch.errors import BenchError
from conch.wire import BODIES


def _target(args: argparse.Namespace, named: list[tuple[Path, str]]
            ) -> tuple[str, str | None, AbstractContextManager[Any]]:
    """(kind, url, context that runs a server conch owns) for the chosen target."""
    from conch.perf.load.bench_run import local_components, local_mme, local_triton

    if args.components and (args.triton or args.mme or args.copies > 1):
        raise BenchError("--components sends each archive's requests to its inference component: leave out --triton, "
                         "--mme and --copies (a component's copies are tritonservers: conch serve --components "
                         "--copy-count N)")
    if args.components and not (args.endpoint_url or args.endpoint):
        local = local_components([a for a, _ in named], args.endpoint or "local",
                                 instance_memory_mb=None if args.memory_budget is None else args.memory_budget // 2**20)
        return ("boto3" if args.client == "boto3" else "sagemaker"), None, local
    if args.triton:
        return "kserve", None, local_triton(named)
    if args.mme:
        mme = local_mme(named, max_loaded=args.max_loaded, memory_budget=args.memory_budget,
                        step_names=args.step_names)
        return ("boto3" if args.client == "boto3" else "sagemaker"), None, mme
    if args.endpoint_url:
        return ("boto3" if args.client == "boto3" else "sagemaker"), args.endpoint_url, nullcontext()
    if args.endpoint:
        return "boto3", None, nullcontext()
    raise BenchError("choose a target: --mme (conch's local MME over the archives), --triton (a local Triton, "
                     "KServe), --endpoint-url URL (the SageMaker runtime API, e.g. `conch serve --mme`), or "
                     "--endpoint NAME (a deployed SageMaker endpoint)")


@contextmanager
def _endpoint_warnings() -> Iterator[None]:
    """The local endpoint's warnings (a step name collision, Triton's lookup race, a restart) on stderr while the
    command runs, one line each."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(logging.WARNING)
    handler.setFormatter(logging.Formatter("conch bench: %(message)s"))
    logger = logging.getLogger("conch.endpoint")
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)


def cmd_bench(args: argparse.Namespace) -> int:
    from conch.perf.load.bench_run import copy_names
    from conch.perf.load.runner import locust_command
    from conch.perf.load.spec import archive_targets
    from conch.perf.load.stages import parse_stages, seed_ramp
    from conch.triton.server import die_with_parent

    if args.worker:  # in a process of its own: locust patches the interpreter it is imported in
        code = subprocess.call(locust_command("worker", "--master-host", args.master_host,
                                              "--port", str(args.master_port), "--stop-timeout", str(args.timeout)),
                               preexec_fn=die_with_parent)  # not outliving this command, also on SIGKILL
        document({"worker": True, "master_host": args.master_host, "master_port": args.master_port,
                  "exit_code": code})
        return code
    if args.probe:
        with _endpoint_warnings():
            return cmd_probe(args)
    if not args.archives:
        raise BenchError("give the archives to send requests to (.tar.gz files or folders of them)")
    _check_load_figures(args)
    named = copy_names(bench_archives(args.archives), args.copies)
    stages = seed_ramp(args.max_users) if args.max_users and args.stages == "seed" else parse_stages(args.stages)
    kind, url, server = _target(args, named)
    targets = archive_targets([a for a, _ in named], [n for _, n in named], body_kind=args.body,
                              payloads=targets_payloads(args.payload))
    with _endpoint_warnings():
        return _run(args, kind, url, server, targets, stages, [n for _, n in named])


def targets_payloads(payload: Path | None) -> list[Any] | None:
    """The requests of ``--payload FILE``, or None to send each archive's samples."""
    from conch.ensembles.payloads import read_payload_file

    return read_payload_file(payload) if payload is not None else None


def _run(args: argparse.Namespace, kind: str, url: str | None, server: AbstractContextManager[Any],
         targets: list[Any], stages: list[Any], names: list[str]) -> int:
    from conch.perf.load.bench_run import endpoint_metrics, run_bench
    from conch.perf.load.display import load_progress
    from conch.perf.load.run_summary import table, write_json
    from conch.perf.load.spec import LoadSpec

    with server as own:
        own_url = own if isinstance(own, str) or own is None else own.url
        mme = None if isinstance(own, str) or own is None else own
        spec = LoadSpec(kind, own_url or url, targets, stages, endpoint=args.endpoint or "local",
                        region=args.region or "us-east-1", zipf=args.zipf, seed=args.seed, check=not args.no_check,
                        wait=args.wait, timeout=args.timeout, components=args.components)
        say(f"load test: {len(stages)} stages, {spec.duration():.0f} s, up to {max(s.users for s in stages)} users, "
            f"{len(targets)} TargetModels via {kind} at {spec.url or 'AWS'}")
        # The server's CPUs, when it runs on this machine: `conch plan` scales CPU instance types by them.
        here = spec.url is not None and urlsplit(spec.url).hostname in ("127.0.0.1", "localhost", "::1")
        extra: dict[str, Any] = {"machine": {"cpus": os.cpu_count()}} if here else {}
        # the endpoint's own counts (restarts, lookup retries, collisions), when conch serves it
        url = spec.url

        def finish() -> dict[str, Any] | None:
            return mme.metrics_json() if mme is not None else endpoint_metrics(url) if url else None

        before = finish()
        if before is not None:
            extra["mme_metrics_before"] = before
        around = bench_profiler(args, own, names)
        # without a bar (--quiet, or stderr is not a terminal) the load's progress events are dropped
        with load_progress(spec) if bars_shown() else nullcontext(lambda event: None) as progress:
            output = run_bench(spec, args.out, workers=args.workers, remote_workers=args.remote_workers,
                               bind=args.master_bind, port=args.master_port, progress=progress, extra=extra,
                               finish=finish if before is not None else None)
        if around is not None:  # per-step figures of the load, into bench.json's "profile"
            output.summary["profile"] = bench_profiles(around, output.summary, spec.url or kind)
            write_json(output.summary, output.json_path)
    shown(table(output.summary))
    say(f"wrote {output.json_path} and {output.png_path}")
    document({**output.summary, "json_path": str(output.json_path), "png_path": str(output.png_path)})
    found = output.summary["problems"]
    if found:
        error(f"bench failed: {'; '.join(found)}")
        return 1
    say(f"clean run: {output.summary['requests']} requests, 0 failed")
    return 0


def _check_load_figures(args: argparse.Namespace) -> None:
    """Refuse what argparse lets through but the load test would misread (--max-users 0 meant the full ramp,
    --copies 0 one copy, --timeout 0 a crash on the first request)."""
    wrong = [f"{flag} {value:g}" for flag, value, ok in (
        ("--copies", args.copies, args.copies >= 1),
        ("--max-users", args.max_users, args.max_users is None or args.max_users >= 1),
        ("--workers", args.workers, args.workers >= 0),
        ("--remote-workers", args.remote_workers, args.remote_workers >= 0),
        ("--timeout", args.timeout, args.timeout > 0),
        ("--wait", args.wait, args.wait >= 0),
        ("--zipf", args.zipf, args.zipf >= 0),
    ) if not ok]
    if wrong:
        raise BenchError(f"out of range: {', '.join(wrong)} (copies and users count from 1, workers from 0; "
                         "--timeout is positive; --wait and --zipf are not negative)")


def cmd_probe(args: argparse.Namespace) -> int:
    from conch.endpoint.metrics import lenient
    from conch.perf.load.run_summary import write_json
    from conch.perf.probe import plot_probe, probe

    if not args.memory_budget:
        raise BenchError("the probe fills a memory budget: give --memory-budget, e.g. 8GiB")
    say(f"probe: loading copies of {args.probe.name} through the local MME until {args.threshold:.0%} of "
        f"{args.memory_budget / 2**30:.2f} GiB is used")

    def show(copy: Any) -> None:
        say(f"  copy {copy.index}: first call {copy.load_s:.2f} s, memory {copy.memory_bytes / 2**20:.0f} MiB, "
            f"{copy.loaded} loaded")

    found = probe(args.probe, args.memory_budget, threshold=args.threshold, max_copies=args.max_copies,
                  progress=show, step_names=args.step_names, payloads=targets_payloads(args.payload)).to_json()
    write_json(found, args.out / "probe.json")
    plot_probe(found, args.out / "probe.png")
    shown(json.dumps({k: v for k, v in found.items() if k != "copies"}, indent=1))
    say(f"{found['copies_fit']} copies fit ({found['stopped_because']}); wrote {args.out / 'probe.json'} and "
        f"{args.out / 'probe.png'}")
    document({**found, "json_path": str(args.out / "probe.json"), "png_path": str(args.out / "probe.png")})
    kind = lenient(found["endpoint"])
    if kind:
        error(f"probe not clean: {', '.join(kind)} (--step-names {found['endpoint']['step_names']}; isolate "
              "measures what `conch deploy --copies` uploads)")
        return 1
    return 0 if found["copies_fit"] else 1


def register(sub: Subcommands) -> None:
    b = sub.add_parser("bench", help="load-test archives with Locust over a ramp of users and report each stage")
    add_python_flags(b)
    b.add_argument("archives", nargs="*", type=Path, help=".tar.gz archives built by `conch build`, or folders")
    where = b.add_argument_group("target (one of)")
    where.add_argument("--mme", action="store_true", help="conch's local MME over the archives (TargetModel: the "
                                                          "archive's name), SageMaker runtime API")
    where.add_argument("--triton", action="store_true", help="a local Triton conch starts, archives loaded MME-style, "
                                                             "requests over KServe v2")
    where.add_argument("--endpoint-url",
                       help="an endpoint speaking the SageMaker runtime API (e.g. `conch serve --mme`)")
    where.add_argument("--endpoint", help="endpoint name (default 'local' with --endpoint-url; alone: a deployed "
                                          "SageMaker endpoint, called through boto3)")
    where.add_argument("--client", choices=("http", "boto3"), default="http",
                       help="with --endpoint-url: plain HTTP (default) or boto3's sagemaker-runtime client")
    where.add_argument("--region", help="AWS region for boto3 (default us-east-1)")
    where.add_argument("--components", action="store_true", help="each archive is an inference component "
                       "(<endpoint>-<archive stem>): of --endpoint-url / --endpoint, or alone of a local endpoint with "
                       "inference components conch starts over the archives (--memory-budget: its instance memory)")
    mme = b.add_argument_group("the local MME (--mme) and the probe (--probe)")
    mme.add_argument("--max-loaded", type=int, help="at most this many TargetModels loaded (LRU unloads the rest)")
    mme.add_argument("--memory-budget", type=size, help="memory budget of the MME, e.g. 8GiB")
    mme.add_argument("--copies", type=int, default=1, help="serve each archive under this many TargetModels (with "
                     "--step-names shared, copies collide and the run fails: isolate measures what `conch deploy "
                     "--copies` uploads)")
    add_step_names(mme)
    mme.add_argument("--probe", type=Path, metavar="ARCHIVE",
                     help="instead of a load test: load copies of ARCHIVE until --threshold of --memory-budget")
    mme.add_argument("--threshold", type=float, default=0.9, help="with --probe: share of the budget (default 0.9)")
    mme.add_argument("--max-copies", type=int, default=200, help="with --probe: stop after this many copies")
    load = b.add_argument_group("traffic")
    load.add_argument("--stages", default="seed", help="preset (seed: the full ramp to 200 users; quick; test), "
                                                      "a JSON list like "
                                                      "[{\"duration\": 30, \"users\": 10, \"spawn_rate\": 5}, ...] "
                                                      "(durations count from the start), or a file holding one")
    load.add_argument("--max-users", type=int, help="with the seed ramp: stop at this many users (default 200)")
    load.add_argument("--zipf", type=float, default=0.0, help="skew over the TargetModels in the order given "
                                                              "(0: uniform)")
    load.add_argument("--body", choices=BODIES, default="binary",
                      help="request bodies (binary+json by default; JSON where the inputs allow)")
    load.add_argument("--payload", type=Path, help="send this instead of each archive's samples: a KServe v2 JSON "
                      "request, or the samples file `conch import` writes (for archives made by hand)")
    load.add_argument("--no-check", action="store_true", help="count HTTP 200 as success without checking answers")
    load.add_argument("--wait", type=float, default=0.0, help="seconds each user waits between requests")
    load.add_argument("--timeout", type=float, default=120.0, help="seconds before a request counts as failed")
    load.add_argument("--seed", type=int, default=0)
    dist = b.add_argument_group("distributed load (Locust master/worker)")
    dist.add_argument("--workers", type=int, default=0, help="worker processes on this machine (0: one process)")
    dist.add_argument("--remote-workers", type=int, default=0,
                      help="also wait for this many workers started elsewhere with `conch bench --worker`")
    dist.add_argument("--master-bind", default="127.0.0.1", help="address the master listens on (0.0.0.0 for "
                                                                 "remote workers)")
    dist.add_argument("--master-port", type=int, default=5557)
    dist.add_argument("--worker", action="store_true", help="run as a worker of a master elsewhere, then exit")
    dist.add_argument("--master-host", default="127.0.0.1", help="with --worker: the master's address")
    b.add_argument("--out", type=Path, default=Path("bench-results"), help="folder for bench.json and bench.png")
    b.add_argument("--profile", action="store_true", help="also per-step figures from Triton's statistics before and "
                   "after the load (`conch profile`'s report), into bench.json's \"profile\"")
    b.add_argument("--stats-url", help="with --profile and --endpoint-url: the KServe v2 HTTP address of the Triton "
                   "behind the endpoint (`conch serve` prints it as triton.http_port)")
    b.set_defaults(func=cmd_bench)
