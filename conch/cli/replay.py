"""`conch replay`: each archive's sample payloads replayed on a local tritonserver, loaded as SageMaker's MME
loads it, through every endpoint (KServe v2 and SageMaker's JSON and binary bodies), each answer judged."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from conch.cli.console import document, live_rows, progress_bar, result, say
from conch.cli.discovery import one_line, skipping
from conch.cli.flags import Subcommands, add_ensemble_flags, add_load_flags, add_python_flags
from conch.cli.profiling import ReplayProfiler
from conch.scratch import scratch_temp
from conch.wire import ENDPOINTS

if TYPE_CHECKING:
    from collections.abc import Sequence

    from conch.archive.manifest import Manifest
    from conch.replays.local_replay import ReplaySample, SampleChooser
    from conch.replays.recording import Recorder


def cmd_replay(args: argparse.Namespace) -> int:
    from conch.builder.discover import discover, sort_paths
    from conch.builder.repository_build import build_ensemble
    from conch.errors import ConchError
    from conch.replays.local_replay import replay_archives
    from conch.verdicts import ReplayReport, ReplayRow, replay_document

    given = sort_paths(args.paths)
    archives, sources = given.archives, given.sources
    chooser, recorder = payload_options(args)
    failures: list[ReplayRow] = []
    with scratch_temp("conch-replay-") as tmp:
        failed: list[str] = []
        for ensemble in discover(sources, on_error=skipping(failed)) if sources else []:
            if args.only and ensemble.name not in args.only:
                continue
            say(f"building {ensemble.name} (local target, release {args.release})")
            try:
                archives.append(build_ensemble(ensemble, Path(tmp), "local", args.release, progress=say))
            except Exception as exc:  # the other ensembles still replay
                say(f"conch: error: {exc}" if isinstance(exc, ConchError) else
                    f"conch: error: ensemble {ensemble.name!r}: {type(exc).__name__}: {exc}")
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
                archives, endpoints=args.endpoint or ENDPOINTS,
                load_timeout=args.load_timeout, progress=say, live=say if live_rows() else None,
                server=profiler.server,
                done=replayed, samples=chooser, heard=recorder.heard if recorder else None,
            ) if archives else None
    if recorder is not None:
        for folder in recorder.write():
            say(f"recorded {folder} (outputs marked as recorded, not checked: review them)")
    rows = failures + (report.rows if report else [])
    for row in rows:
        if row.endpoint == "check" and not row.passed:
            say(f"conch: error: {one_line(row.detail)}")
    full = ReplayReport(rows, report.restarts if report else [])
    if args.junit_xml:
        from conch.replays.junit_xml import write_junit

        write_junit(full, args.junit_xml)
    result(full.table())
    document({**replay_document(full), **profiler.document()})
    if full.errors:
        return 2
    return 0 if full.passed else 1


def payload_options(args: argparse.Namespace) -> tuple[SampleChooser | None, Recorder | None]:
    """What ``--payload``, ``--payloads`` and ``--record`` ask of the replay: where each archive's samples come from
    (one request file; or a payload folder: ``DIR/<archive>/`` when it exists, else ``DIR`` itself), and who keeps
    the answers."""
    chooser: SampleChooser | None = None
    if args.payload is not None and args.payloads is not None:
        from conch.errors import ServeError

        raise ServeError("give --payload FILE (one request for every archive) or --payloads DIR (a payload folder), "
                         "not both")
    if args.payload is not None:
        from conch.ensembles.payloads import read_payload_file

        given = read_payload_file(args.payload)

        def chooser(archive: Path, manifest: Manifest | None) -> Sequence[ReplaySample]:
            return given

    if args.payloads is not None:
        from conch.ensembles.payloads import payloads_of, read_payloads

        root: Path = args.payloads
        if not root.is_dir():
            read_payloads(root)  # refused before a server starts: the folder is missing

        def chooser(archive: Path, manifest: Manifest | None) -> Sequence[ReplaySample]:
            return payloads_of(root, archive.name)

    recorder = None
    if args.record is not None:
        from conch.replays.recording import Recorder

        recorder = Recorder(args.record)
    return chooser, recorder


def register(sub: Subcommands) -> None:
    r = sub.add_parser("replay", help="replay sample payloads on a local Triton, loaded as SageMaker MME loads")
    add_python_flags(r)
    r.add_argument("paths", nargs="+", type=Path, help="ensemble files/folders (built for local) or .tar.gz")
    r.add_argument("--endpoint", action="append", choices=ENDPOINTS,
                   help="replay through this endpoint only (repeatable; default: every one)")
    r.add_argument("--load-timeout", type=float, default=300.0, help="seconds before a model load counts as hung")
    r.add_argument("--payloads", type=Path, metavar="DIR",
                   help="replay the samples of this payload folder instead of the archive's own: NAME.request.json "
                   "(or .bin) with NAME.expected.json beside it, in DIR/<archive>/ or DIR (docs/harness.md)")
    r.add_argument("--record", type=Path, metavar="DIR",
                   help="write each sample's request and the answer it got to DIR/<archive>/, as a payload folder "
                   "(the outputs marked as recorded, not checked)")
    r.add_argument("--junit-xml", type=Path, metavar="PATH",
                   help="also write the rows as JUnit XML (one testcase per sample and endpoint) for CI")
    r.add_argument("--profile", action="store_true", help="also profile each archive after its replay (`conch "
                   "profile`'s report: per-step figures, critical path, findings)")
    add_load_flags(r)
    add_ensemble_flags(r)
    r.set_defaults(func=cmd_replay)
