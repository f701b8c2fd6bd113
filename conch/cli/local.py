"""`conch build | replay | inspect`: the commands that work on this machine alone."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from conch.builder.parallel import default_jobs
from conch.cli.console import document, error, progress_bar, quiet_mode, result, say
from conch.cli.profile import ReplayProfiler, add_load_flags
from conch.ensembles.target import DEFAULT_RELEASE, Target
from conch.errors import ConchError
from conch.scratch import scratch_temp
from conch.wire import ENDPOINTS

if TYPE_CHECKING:
    from conch.builder.parallel import BuildOutcome
    from conch.ensembles.ensemble import Ensemble
    from conch.harness.replay import ReplayReport


def cmd_build(args: argparse.Namespace) -> int:
    from conch.builder.discover import Shard, locate
    from conch.builder.parallel import BuildJob, build_all

    shard = Shard.parse(args.shard) if args.shard else None  # a bad K/N stops before anything is imported
    failed: list[str] = []
    found = locate(args.paths, on_error=_skipping(failed))
    total = len(found) + len(failed)  # a file that does not load counts as one failed ensemble (in every shard)
    if args.only:
        found = [(file, e) for file, e in found if e.name in set(args.only)]
    if not found and not failed:
        say("conch: error: no ensembles found; give .py files that declare conch.Ensemble objects at module level")
        return 2
    if shard is not None:
        say(f"shard {shard}: {sum(shard.holds(e.name) for _, e in found)} of the {len(found)} ensembles found")
        found = [(file, e) for file, e in found if shard.holds(e.name)]
    jobs = [BuildJob(file, e.name, args.out, args.target, args.release, args.refresh, args.repo_dir)
            for file, e in found]
    finished: list[BuildOutcome] = []

    with progress_bar("building", len(jobs)) as bar:
        def done(outcome: BuildOutcome) -> None:  # one ensemble that cannot build does not stop the others
            finished.append(outcome)
            bar.advance()
            count = f"[{len(finished)}/{len(jobs)}]"
            if outcome.error is not None or outcome.archive is None:
                error(str(outcome.error))
            elif outcome.written:
                say(f"{count} built {outcome.archive} ({outcome.archive.stat().st_size / 1e6:.1f} MB, "
                    f"{args.target}, release {args.release}, {outcome.seconds:.1f} s)")
            else:
                say(f"{count} unchanged {outcome.archive} ({outcome.seconds:.2f} s)")
            _say_output(outcome, args.verbose)

        # under --quiet no progress at all, so parallel workers print none either
        outcomes = build_all(jobs, args.jobs, done, progress=None if quiet_mode() else bar.note) if jobs else []
    failed += [o.ensemble for o in outcomes if o.error is not None]
    document({
        "target": args.target, "release": args.release, "out": str(args.out), "ok": not failed, "failed": failed,
        "shard": str(shard) if shard else None,
        "ensembles": [{"ensemble": o.ensemble, "archive": None if o.archive is None else str(o.archive),
                       "written": o.written, "bytes": None if o.archive is None else o.archive.stat().st_size,
                       "seconds": round(o.seconds, 3), "error": o.error,
                       "output": [c.to_json() for c in o.output]} for o in outcomes],
    })
    if failed:
        say(f"conch: {len(failed)} of {total} ensembles failed to build: {', '.join(failed)}")
        return 2
    return 0


def _say_output(outcome: BuildOutcome, verbose: bool) -> None:
    """What the ensemble's code said while it was built: one line, or everything with ``-v``."""
    from conch.builder.capture import summary

    if not verbose:
        line = summary(outcome.ensemble, outcome.output)
        if line:
            say(line)
        return
    for said in outcome.output:
        say(f"--- {outcome.ensemble}: {said.what}\n{said.text()}")


def discover_each(paths: Sequence[Path], failed: list[str]) -> list[Ensemble]:
    """The ensembles of every file that loads; each file that does not is reported and added to ``failed``."""
    from conch.builder.discover import discover

    return discover(paths, on_error=_skipping(failed))


def _skipping(failed: list[str]) -> Callable[[ConchError], None]:
    """An ``on_error`` for discovery: say the error in one line, note the file as failed, carry on."""
    def skip(exc: ConchError) -> None:
        say(f"conch: error: {one_line(exc)}")
        failed.append(str(exc).split(":", 1)[0])

    return skip


def report_failure(what: str, exc: BaseException) -> None:
    """One `conch: error:` line for a failure that should not stop the other items."""
    if isinstance(exc, ConchError):
        say(f"conch: error: {exc}")
    else:
        say(f"conch: error: {what}: {type(exc).__name__}: {exc}")


def one_line(text: object) -> str:
    return " ".join(str(text).split())


def cmd_replay(args: argparse.Namespace) -> int:
    from conch.builder.build import build_ensemble
    from conch.builder.discover import sort_paths
    from conch.harness.replay import ReplayReport, ReplayRow, replay_archives

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


def replay_document(report: ReplayReport) -> dict[str, Any]:
    """A replay's rows for scripts: each ensemble, sample, endpoint, verdict, time and detail."""
    skipped = sum(not r.applicable for r in report.rows)
    passed = sum(r.passed for r in report.rows) - skipped
    return {"passed": report.passed, "passed_rows": passed, "failed_rows": len(report.rows) - passed - skipped,
            "not_applicable_rows": skipped,
            "rows": [{"ensemble": r.ensemble, "sample": r.sample, "endpoint": r.endpoint, "passed": r.passed,
                      "applicable": r.applicable, "millis": round(r.millis, 3), "detail": r.detail}
                     for r in report.rows]}


def cmd_inspect(args: argparse.Namespace) -> int:
    from conch.builder.inspection import inspect_archive

    found = inspect_archive(args.archive)
    if args.json:
        print(json.dumps(found.to_json(), indent=1, sort_keys=True))
    elif not args.quiet:
        print("\n".join(found.lines()))
    if not found.ok:
        say(f"conch: {found.check.summary()}")
    return 0 if found.ok else 1


def common(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--release", default=DEFAULT_RELEASE, help=f"Triton release YY.MM (default {DEFAULT_RELEASE})")
    sp.add_argument("--only", action="append", help="only this ensemble (repeatable)")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    b = sub.add_parser("build", help="build one MME tarball per ensemble")
    b.add_argument("paths", nargs="+", type=Path, help="ensemble .py files or folders of them")
    b.add_argument("--out", type=Path, default=Path("dist"), help="folder for the .tar.gz archives (default dist)")
    b.add_argument("--target", choices=[t.value for t in Target], default=Target.PRODUCTION.value,
                   help="production (default): the archives SageMaker serves; local: every step with a CPU "
                        "stand-in, for `conch replay` and `conch serve` on this machine")
    b.add_argument("--repo-dir", type=Path, help="also write each repository unpacked here")
    b.add_argument("-j", "--jobs", type=int, default=default_jobs(),
                   help=f"ensembles built at once, one process each (default: every core, here {default_jobs()})")
    b.add_argument("--shard", metavar="K/N", help="build only shard K of N (1 <= K <= N), split by ensemble name: "
                   "N jobs with the same sources build every ensemble once (docs/ci-matrix.md)")
    b.add_argument("--refresh", action="store_true",
                   help="ask the package index again, recompute sample expected outputs and run the warmup and "
                   "samples in-process again (all normally cached)")
    b.add_argument("-v", "--verbose", action="store_true",
                   help="show the warnings and output of the ensembles' own code (exports, expected outputs) in "
                        "full, not one line per ensemble")
    common(b)
    b.set_defaults(func=cmd_build)

    r = sub.add_parser("replay", help="replay sample payloads on a local Triton, loaded as SageMaker MME loads")
    r.add_argument("paths", nargs="+", type=Path, help="ensemble files/folders (built for local) or .tar.gz")
    r.add_argument("--endpoint", action="append", choices=ENDPOINTS,
                   help="replay through this endpoint only (repeatable; default: every one)")
    r.add_argument("--load-timeout", type=float, default=300.0, help="seconds before a model load counts as hung")
    r.add_argument("--profile", action="store_true", help="also profile each archive after its replay (`conch "
                   "profile`'s report: per-step figures, critical path, findings)")
    add_load_flags(r)
    common(r)
    r.set_defaults(func=cmd_replay)

    i = sub.add_parser("inspect", help="an archive's tree, model configs, environments, warmup and shared memory, "
                       "and its `conch check` (exit 1 when the check fails)")
    i.add_argument("archive", type=Path, help="a .tar.gz archive built by `conch build` (or a hand-made one)")
    out = i.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="everything as one JSON object (manifest included)")
    out.add_argument("--quiet", "-q", action="store_true", help="print nothing; the exit code tells")
    i.set_defaults(func=cmd_inspect)
