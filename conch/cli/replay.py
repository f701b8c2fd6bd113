"""`conch replay`: each archive's sample payloads replayed on a local tritonserver, loaded as SageMaker's MME
loads it, through every endpoint (KServe v2 and SageMaker's JSON and binary bodies), each answer judged."""

from __future__ import annotations

import argparse
from pathlib import Path

from conch.cli.console import document, progress_bar, result, say
from conch.cli.discovery import discover_each, one_line, report_failure
from conch.cli.flags import Subcommands, add_ensemble_flags, add_load_flags
from conch.cli.profiling import ReplayProfiler
from conch.scratch import scratch_temp
from conch.wire import ENDPOINTS


def cmd_replay(args: argparse.Namespace) -> int:
    from conch.builder.discover import sort_paths
    from conch.builder.repository_build import build_ensemble
    from conch.harness.local_replay import replay_archives
    from conch.verdicts import ReplayReport, ReplayRow, replay_document

    given = sort_paths(args.paths)
    archives, sources = given.archives, given.sources
    failures: list[ReplayRow] = []
    with scratch_temp("conch-replay-") as tmp:
        failed: list[str] = []
        for ensemble in discover_each(sources, failed) if sources else []:
            if args.only and ensemble.name not in args.only:
                continue
            say(f"building {ensemble.name} (local target, release {args.release})")
            try:
                archives.append(build_ensemble(ensemble, Path(tmp), "local", args.release, progress=say))
            except Exception as exc:  # the other ensembles still replay
                report_failure(f"ensemble {ensemble.name!r}", exc)
                failures.append(ReplayRow(ensemble.name, "-", "build", False, one_line(exc)))
        failures += [ReplayRow(name, "-", "build", False, "does not load") for name in failed]
        if not archives and not failures:
            say("conch: error: nothing to replay; give ensemble files, folders, or .tar.gz archives")
            return 2
        with progress_bar("replaying", len(archives)) as bar, ReplayProfiler(args, archives) as profiler:
            def replayed(archive: Path) -> None:
                bar.advance()
                profiler.done(archive)  # with --profile, on the server that replayed it

            report = replay_archives(
                archives, endpoints=args.endpoint or ("kserve", "sagemaker-json", "sagemaker-binary"),
                load_timeout=args.load_timeout, progress=say, server=profiler.server,
                done=replayed,
            ) if archives else None
    rows = failures + (report.rows if report else [])
    for row in rows:
        if row.endpoint == "check" and not row.passed:
            say(f"conch: error: {one_line(row.detail)}")
    full = ReplayReport(rows)
    result(full.table())
    document({**replay_document(full), **profiler.document()})
    if full.errors:
        return 2
    return 0 if full.passed else 1


def register(sub: Subcommands) -> None:
    r = sub.add_parser("replay", help="replay sample payloads on a local Triton, loaded as SageMaker MME loads")
    r.add_argument("paths", nargs="+", type=Path, help="ensemble files/folders (built for local) or .tar.gz")
    r.add_argument("--endpoint", action="append", choices=ENDPOINTS,
                   help="replay through this endpoint only (repeatable; default: every one)")
    r.add_argument("--load-timeout", type=float, default=300.0, help="seconds before a model load counts as hung")
    r.add_argument("--profile", action="store_true", help="also profile each archive after its replay (`conch "
                   "profile`'s report: per-step figures, critical path, findings)")
    add_load_flags(r)
    add_ensemble_flags(r)
    r.set_defaults(func=cmd_replay)
