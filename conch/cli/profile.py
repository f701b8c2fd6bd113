"""`conch profile`: where the time goes in each ensemble: per-step figures from Triton's statistics extension
around a run, the critical path, the ensemble scheduler's share, findings, and pictures."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from conch.cli.console import document, error, result, say
from conch.cli.discovery import local_builds
from conch.cli.flags import Subcommands, add_ensemble_flags, add_load_flags, add_python_flags
from conch.cli.profiling import load_of

if TYPE_CHECKING:
    from conch.archive.manifest import Manifest
    from conch.perf.profile.profile_report import Profile

def _remote(args: argparse.Namespace) -> list[Profile]:
    """A server conch does not own: a KServe v2 server (``--url``), or a SageMaker runtime front such as `conch
    serve` (``--url`` + ``--stats-url``, its Triton's HTTP port from the ready line)."""
    from conch.archive.manifest import read_manifest
    from conch.errors import ServeError
    from conch.perf.profile.load import Target
    from conch.perf.profile.measure import measure
    from conch.perf.profile.server_statistics import StatsEndpoint

    given: list[tuple[Path | None, Manifest | None]] = []
    for path in args.paths:
        try:
            given.append((path, read_manifest(path)))
        except Exception as exc:
            raise ServeError(f"{path}: with --url give archives (their samples are sent) or --payload "
                             f"({exc})") from None
    if not given and (args.payload is None or args.model is None):
        raise ServeError("--url needs the archives (for their samples and names) or --payload FILE and --model NAME")
    stats = StatsEndpoint(args.stats_url or args.url, args.metrics_url)
    profiles: list[Profile] = []
    for path, manifest in given or [(None, None)]:
        if args.stats_url:  # a SageMaker runtime front: the ensemble is loaded under its TargetModel
            name = args.model or (path.name if path is not None else "")
            target = Target.front(args.url, args.endpoint_name, name)
        else:
            name = args.model or (manifest.ensemble if manifest is not None else "")
            target = Target.kserve(args.url, name)
        profiles.append(measure(stats, target, name, load_of(args, manifest), args.url))
    return profiles


def _pictures(profile: Profile, args: argparse.Namespace) -> dict[str, Any]:
    """Write the DAG coloured by share (in ``--format``) and the waterfall PNG into ``--out``."""
    from conch.diagram import SUFFIX, picture
    from conch.perf.profile.pictures import MatplotlibMissing, profile_graph, waterfall_png

    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    stem = profile.ensemble.removesuffix(".tar.gz")
    fmt, data, missing = picture(profile_graph(profile), args.format)
    if missing is not None:
        say(f"conch: warning: {missing}; wrote the dot text instead")
    path = out / f"{stem}.profile{SUFFIX[fmt]}"
    path.write_bytes(data)
    written = {"graph": str(path)}
    try:
        png = out / f"{stem}.waterfall.png"
        png.write_bytes(waterfall_png(profile))
        written["waterfall"] = str(png)
    except MatplotlibMissing as exc:
        say(f"conch: warning: {exc}; no waterfall drawn")
    for what, where in written.items():
        say(f"wrote {where} ({what})")
    return written


def cmd_profile(args: argparse.Namespace) -> int:
    from conch.errors import ServeError
    from conch.perf.profile.local_servers import profile_archives
    from conch.scratch import scratch_temp

    failed: list[str] = []
    if args.url:
        profiles = _remote(args)
    else:
        if not args.paths:
            raise ServeError("give the ensembles or archives to profile (.py files, folders, .tar.gz)")
        with scratch_temp("conch-profile-") as tmp:
            archives, _ = local_builds(args, Path(tmp), failed)
            if not archives and not failed:
                raise ServeError("nothing to profile: give ensemble files, folders or .tar.gz archives")

            def failing(archive: Path, exc: Exception) -> None:  # the other archives are still profiled
                error(str(exc) if archive.name in str(exc) else f"{archive.name}: {exc}")
                failed.append(archive.name)

            profiles = profile_archives(archives, lambda m: load_of(args, m), mode="mme" if args.mme else "triton",
                                        load_timeout=args.load_timeout, progress=say,
                                        on_error=failing, manifest_needed=args.payload is None) if archives else []
    docs = []
    for profile in profiles:
        result(profile.table() + "\n")
        doc = profile.to_json()
        if args.out is not None or args.format is not None:
            args.out = args.out or Path(".")
            args.format = args.format or "png"
            doc["pictures"] = _pictures(profile, args)
        docs.append(doc)
    document({"profiles": docs, "failed": failed})
    if failed:
        say(f"conch: {len(failed)} of {len(failed) + len(profiles)} ensembles or archives were not profiled: "
            f"{', '.join(failed)}")
        return 2
    return 0


def register(sub: Subcommands) -> None:
    from conch.diagram import FORMATS

    p = sub.add_parser("profile", help="where the time goes: per-step queue and compute, the critical path, the "
                       "scheduler's share and what to change, from Triton's statistics around a run")
    add_python_flags(p)
    p.add_argument("paths", nargs="*", type=Path, help="ensemble files/folders (built for local) or .tar.gz archives")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--triton", action="store_true", help="a local tritonserver, loaded as SageMaker loads an "
                       "archive (the default)")
    where.add_argument("--mme", action="store_true", help="the local MME: requests through its SageMaker runtime front")
    where.add_argument("--url", help="a running server: KServe v2 HTTP with the statistics extension (e.g. "
                       "http://gpu-host:8000), or with --stats-url a SageMaker runtime front such as `conch serve`")
    p.add_argument("--stats-url", help="with --url of a `conch serve` front: its Triton's HTTP address (the ready "
                   "line's triton.http_port), where the statistics are read")
    p.add_argument("--metrics-url", help="with --url: Triton's metrics address, for p50/p99 from its summary metrics "
                   "(--metrics-config summary_latencies=true)")
    p.add_argument("--model", help="with --url: the ensemble's name on the server (default: the archive's ensemble; "
                   "behind a front, the TargetModel)")
    p.add_argument("--endpoint-name", default="local", help="with --url and --stats-url: the endpoint name (default "
                   "local)")
    add_load_flags(p)
    p.add_argument("--format", choices=FORMATS, help="also draw the DAG coloured by each step's share in this format "
                   "(as `conch graph`), and the waterfall PNG of one request; into --out")
    p.add_argument("--out", type=Path, help="folder for the pictures (default: this folder when --format is given)")
    p.add_argument("--load-timeout", type=float, default=300.0, help="seconds before a model load counts as hung")
    add_ensemble_flags(p)
    p.set_defaults(func=cmd_profile)
