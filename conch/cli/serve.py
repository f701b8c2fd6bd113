"""`conch serve`: a local multi-model endpoint that speaks SageMaker's runtime API, over a folder of archives
or an S3 prefix (`--mme`), or over the ensembles and archives given, all loaded up front."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from conch.cli.console import document, error, result, say
from conch.cli.flags import Subcommands, add_ensemble_flags, add_python_flags, add_step_names, size
from conch.scratch import scratch_temp

if TYPE_CHECKING:
    from conch.endpoint import LocalMME


def _source_folder(args: argparse.Namespace, tmp: Path) -> Path:
    """The given archives and built ensembles gathered in one folder: TargetModel = archive name."""
    from conch.builder.discover import discover, sort_paths
    from conch.builder.repository_build import build_ensemble
    from conch.errors import ServeError
    from conch.perf.profile.local_servers import gather

    given = sort_paths(args.paths, must_exist=True)
    archives, sources = given.archives, given.sources
    folder = tmp / "archives"
    folder.mkdir()
    gather(archives, folder)
    for ensemble in discover(sources) if sources else []:
        if not args.only or ensemble.name in args.only:
            say(f"building {ensemble.name} (local target, release {args.release})")
            build_ensemble(ensemble, folder, "local", args.release, progress=say)
    if not any(folder.iterdir()):
        raise ServeError("nothing to serve: give ensemble files, folders or .tar.gz archives, or --mme SOURCE")
    return folder


def cmd_serve(args: argparse.Namespace) -> int:
    from conch.endpoint import LocalMME
    from conch.errors import ConchError, ServeError

    if args.components:
        return _serve_components(args)
    if bool(args.paths) == bool(args.mme):
        raise ServeError("give either --mme SOURCE (a folder of archives or s3://bucket/prefix, loaded on first "
                         "call) or ensemble files/archives to load up front, not both")
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="conch serve: %(message)s")
    # loads and unloads, one line each (--quiet: errors only)
    logging.getLogger("conch.endpoint").setLevel(logging.ERROR if args.quiet else logging.INFO)
    with scratch_temp("conch-serve-") as tmp:
        source = args.mme or _source_folder(args, Path(tmp))
        mme = LocalMME(source, max_loaded=args.max_loaded, memory_budget=args.memory_budget,
                       disk_budget=args.disk_budget, cache_dir=args.cache_dir, host=args.host, port=args.port,
                       s3_endpoint_url=args.s3_endpoint_url, load_timeout=args.load_timeout, release=args.release,
                       step_names=args.step_names, max_restarts=args.max_restarts, endpoint_name=args.endpoint_name,
                       invocation_timeout=args.invocation_timeout, load_wait=args.load_wait,
                       retry_lookup=args.retry_lookup)
        with mme, _summary_at_exit(mme):
            failed = []
            if not args.mme:
                for archive in sorted(Path(source).glob("*.tar.gz")):
                    try:  # one archive that cannot load does not keep the others from being served
                        mme.load(archive.name)
                    except ConchError as exc:
                        error(str(exc))
                        failed.append(archive.name)
            ready = {"event": "ready", **mme.ready_line(), "failed": failed}
            result(json.dumps(ready))  # a JSON line in every mode but --quiet: scripts wait for it
            document(ready)
            say(f"local MME endpoint {mme.endpoint_name!r} at {mme.url} (models from {mme.source.describe()}); "
                f"boto3: sagemaker-runtime with endpoint_url={mme.url!r}, EndpointName={mme.endpoint_name!r}, "
                "TargetModel='<archive>.tar.gz'; metrics at /metrics; Ctrl-C stops")
            while mme.serving():
                time.sleep(0.5)
            error(f"tritonserver exited and was not restarted again\n{mme.triton.log_tail()}")
            document({"event": "exited", "error": "tritonserver exited and was not restarted again",
                      "log": str(mme.triton.log_path)})
            return 1


def _serve_components(args: argparse.Namespace) -> int:
    """`conch serve --components`: each archive an inference component with copies of its own tritonserver."""
    from conch.endpoint.component_app import RUNTIME_CONFIG
    from conch.endpoint.local_components import LocalComponents
    from conch.errors import ServeError
    from conch.sagemaker.component_resources import read_overrides, read_probes, resources_for
    from conch.wire import component_name

    if args.mme or not args.paths:
        raise ServeError("--components serves the archives (or ensembles) given, each an inference component; "
                         "--mme is for a multi-model endpoint")
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="conch serve: %(message)s")
    logging.getLogger("conch.endpoint").setLevel(logging.ERROR if args.quiet else logging.INFO)
    with scratch_temp("conch-serve-") as tmp:
        archives = sorted(_source_folder(args, Path(tmp)).glob("*.tar.gz"))
        probes, overrides = read_probes(args.probe or []), read_overrides(args.resources)
        memory = None if args.component_memory is None else -(-args.component_memory // 2**20)
        reserved = {a.name: resources_for(a.name, a.name.removesuffix(".tar.gz"), accelerators=0, probes=probes,
                                          overrides=overrides, memory_mb=memory).memory_mb for a in archives}
        names = {component_name(args.endpoint_name, a.name) for a in archives}
        zero = {component_name(args.endpoint_name, z) if z not in names else z for z in args.zero or []}
        local = LocalComponents(archives, endpoint_name=args.endpoint_name, memory_mb=reserved,
                                copies={n: 0 if n in zero else args.copy_count for n in names},
                                instance_memory_mb=None if args.memory is None else args.memory // 2**20,
                                host=args.host, port=args.port, invocation_timeout=args.invocation_timeout)
        with local:
            ready = {"event": "ready", "url": local.url, "endpoint": local.endpoint_name,
                     "components": {n: {"archive": c.archive.name, "copies": c.desired, "memory_mb": c.memory_mb}
                                    for n, c in local.components.items()},
                     "instance_memory_mb": local.instance_memory_mb}
            result(json.dumps(ready))
            document(ready)
            say(f"local endpoint {local.endpoint_name!r} with inference components at {local.url}: "
                f"{', '.join(local.components)}; boto3: invoke_endpoint(EndpointName={local.endpoint_name!r}, "
                f"InferenceComponentName=...); copies: POST {RUNTIME_CONFIG} "
                '{"DesiredRuntimeConfig": {"CopyCount": N}}; metrics at /metrics; Ctrl-C stops')
            while True:
                time.sleep(0.5)


@contextlib.contextmanager
def _summary_at_exit(mme: LocalMME) -> Iterator[None]:
    """When serve ends (Ctrl-C, or a server not restarted): one line counting what production would not have
    done (restarts, lookup retries, step name collisions), the lookup race, and the servers started where the
    machine refused them a network namespace, never silent."""
    from conch.endpoint.metrics import lenient

    try:
        yield
    finally:
        counts = mme.counts()
        line = (f"served with --step-names {counts['step_names']}: {counts['restarts']} tritonserver restarts, "
                f"{counts['collisions']} step name collisions, {counts['lookup_misses']} 'unknown model' answers "
                f"(Triton's lookup race), {counts['lookup_retries']} retried, {counts['not_ready']} "
                f"ModelNotReadyException, {counts['timeouts']} invocation timeouts, {counts.get('exposed_starts', 0)} "
                "tritonserver starts with its SageMaker port open on every interface")
        note = mme.python_note()
        if note:  # never silent: the Python steps did not run on the image's Python
            line += f"; the Python-backend stub {note}"
        (error if lenient(counts) or counts.get("exposed_starts") or note else say)(line)  # stdout: the ready line only


def register(sub: Subcommands) -> None:
    s = sub.add_parser("serve", help="a local SageMaker multi-model endpoint (boto3 sagemaker-runtime) until Ctrl-C")
    add_python_flags(s)
    s.add_argument("paths", nargs="*", type=Path, help="ensemble files/folders (built for local) or .tar.gz, "
                   "all loaded up front")
    s.add_argument("--mme", metavar="SOURCE", help="folder of archives or s3://bucket/prefix; each TargetModel is "
                   "downloaded and loaded on its first call")
    s.add_argument("--host", default="127.0.0.1", help="address of the front (default 127.0.0.1)")
    s.add_argument("--port", type=int, default=8080, help="port of the front (default 8080; 0: any free port)")
    s.add_argument("--max-loaded", type=int, help="at most this many TargetModels loaded (LRU unloaded first)")
    s.add_argument("--memory-budget", type=size, help="PSS of tritonserver + stubs loads may not pass, e.g. 6GiB")
    s.add_argument("--disk-budget", type=size, help="unpacked archives kept on disk, e.g. 20GB")
    s.add_argument("--cache-dir", type=Path, help="where archives are unpacked (default: a temp folder)")
    s.add_argument("--s3-endpoint-url", help="S3-compatible server for s3:// sources, e.g. http://127.0.0.1:5000")
    s.add_argument("--load-timeout", type=float, default=300.0, help="seconds before a load counts as hung")
    add_ensemble_flags(s)
    add_step_names(s)
    s.add_argument("--max-restarts", type=int, default=5, help="times tritonserver is restarted after it exits "
                   "(default 5; each restart is counted and reported: SageMaker's container does not come back "
                   "this way)")
    s.add_argument("--endpoint-name", default="local", help="the EndpointName callers use (default 'local'): boto3 "
                   "code written for a real endpoint name runs unchanged; other names get SageMaker's ValidationError")
    s.add_argument("--invocation-timeout", type=float, default=60.0, help="seconds an invocation is answered within "
                   "(default 60, SageMaker's limit); past them SageMaker's timeout ModelError")
    s.add_argument("--load-wait", type=float, default=60.0, help="seconds a call waits for its TargetModel to load "
                   "(default 60, SageMaker's); past them ModelNotReadyException (429) while the load goes on")
    s.add_argument("--retry-lookup", action="store_true", help="ask Triton once more when it answers 'unknown model' "
                   "for a loaded TargetModel (a race in Triton; SageMaker passes the answer on); retries are counted")
    ic = s.add_argument_group("inference components (--components)")
    ic.add_argument("--components", action="store_true", help="serve each archive as an inference component "
                    "(<endpoint-name>-<archive stem>), one tritonserver per copy, routed by InferenceComponentName")
    ic.add_argument("--copy-count", type=int, default=1, help="copies each component starts with (default 1)")
    ic.add_argument("--zero", action="append", metavar="COMPONENT", help="start this component (or archive) at zero "
                    "copies: calls are refused as SageMaker refuses them until a scale-out (repeatable)")
    ic.add_argument("--memory", type=size, help="the instance's memory that the copies' reservations must fit "
                    "(default: this machine's), e.g. 16GiB")
    ic.add_argument("--component-memory", type=size, help="memory one copy reserves (default: --probe, else 1 GiB)")
    ic.add_argument("--probe", type=Path, action="append", metavar="PROBE.json",
                    help="what `conch bench --probe` measured of an archive (repeatable)")
    ic.add_argument("--resources", type=Path, metavar="FILE", help="per ensemble reservations, as conch deploy takes")
    s.set_defaults(func=cmd_serve)
