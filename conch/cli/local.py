"""`conch build | replay | graph | inspect`: the commands that work on this machine alone."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from conch.builder.parallel import default_jobs
from conch.builder.scratch import scratch_temp
from conch.cli.console import say
from conch.ensembles.target import DEFAULT_RELEASE, Target
from conch.errors import ConchError

if TYPE_CHECKING:
    from conch.ensembles.ensemble import Ensemble


def split_sources(paths: Sequence[Path]) -> tuple[list[Path], list[Path]]:
    """(archives, python sources) among the given paths; a folder contributes whichever it holds."""
    archives: list[Path] = []
    sources: list[Path] = []
    for path in paths:
        if path.is_dir():
            archives.extend(sorted(path.glob("*.tar.gz")))
            if any(not p.name.startswith("_") for p in path.glob("*.py")):
                sources.append(path)
        elif path.name.endswith(".tar.gz"):
            archives.append(path)
        else:
            sources.append(path)
    return archives, sources


def cmd_build(args: argparse.Namespace) -> int:
    from conch.builder.discover import locate
    from conch.builder.parallel import BuildJob, BuildOutcome, build_all

    failed: list[str] = []
    found = locate(args.paths, on_error=_skipping(failed))
    total = len(found) + len(failed)  # a file that does not load counts as one failed ensemble
    if args.only:
        found = [(file, e) for file, e in found if e.name in set(args.only)]
    if not found and not failed:
        say("conch: error: no ensembles found; give .py files that declare conch.Ensemble objects at module level")
        return 2
    jobs = [BuildJob(file, e.name, args.out, args.target, args.release, args.refresh, args.repo_dir)
            for file, e in found]
    finished: list[BuildOutcome] = []

    def done(outcome: BuildOutcome) -> None:  # one ensemble that cannot build does not stop the others
        finished.append(outcome)
        count = f"[{len(finished)}/{len(jobs)}]"
        if outcome.error is not None or outcome.archive is None:
            say(f"conch: error: {outcome.error}")
        elif outcome.written:
            say(f"{count} built {outcome.archive} ({outcome.archive.stat().st_size / 1e6:.1f} MB, {args.target}, "
                f"release {args.release}, {outcome.seconds:.1f} s)")
        else:
            say(f"{count} unchanged {outcome.archive} ({outcome.seconds:.2f} s)")

    outcomes = build_all(jobs, args.jobs, done, progress=say) if jobs else []
    failed += [o.ensemble for o in outcomes if o.error is not None]
    if failed:
        say(f"conch: {len(failed)} of {total} ensembles failed to build: {', '.join(failed)}")
        return 2
    return 0


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
    from conch.harness.replay import ReplayReport, ReplayRow, replay_archives

    archives, sources = split_sources(args.paths)
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
        report = replay_archives(
            archives, endpoints=args.endpoint or ("kserve", "sagemaker-json", "sagemaker-binary"),
            load_timeout=args.load_timeout, progress=say,
        ) if archives else None
    rows = failures + (report.rows if report else [])
    for row in rows:
        if row.endpoint == "check" and not row.passed:
            say(f"conch: error: {one_line(row.detail)}")
    full = ReplayReport(rows)
    print(full.table())
    if full.errors:
        return 2
    return 0 if full.passed else 1


def cmd_graph(args: argparse.Namespace) -> int:
    from conch.builder.discover import discover

    for ensemble in discover(args.paths):
        if not args.only or ensemble.name in args.only:
            print(ensemble.graph_dot())
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    manifest, entries = read_archive_manifest(args.archive)
    if args.json:
        print(json.dumps(manifest, indent=1, sort_keys=True))
        return 0
    try:
        lines = [f"ensemble {manifest['ensemble']}  target {manifest['target']}  release {manifest['release']} "
                 f"(stub Python {manifest['stub_python']})"]
        for io in ("inputs", "outputs"):
            for t in manifest["schema"][io]:
                lines.append(f"  {io[:-1]:6} {t['name']:24} {t['datatype']:6} {t['shape']}")
        for step in manifest["steps"]:
            lines.append(f"  step   {step['model_name']:24} {step['served_as']}")
        lines.append(f"  {len(manifest['samples'])} samples, {entries} archive entries")
    except (KeyError, TypeError, IndexError) as exc:
        raise ConchError(f"{args.archive}: its manifest lacks {exc} or has it in another form; rebuild the archive "
                         "with `conch build` (or `conch inspect --json` shows the manifest as it is)") from None
    print("\n".join(lines))
    return 0


def read_archive_manifest(archive: Path) -> tuple[dict[str, Any], int]:
    """The manifest of an archive and its number of entries; ArchiveError for a missing or unreadable one."""
    import tarfile
    import zlib

    from conch.builder.manifest import MANIFEST_NAME
    from conch.errors import ArchiveError

    if not archive.is_file():
        raise ArchiveError(f"{archive}: no such archive; give the path of a .tar.gz built by `conch build`")
    try:
        with tarfile.open(archive, "r|*") as tar:
            manifest, entries = None, 0
            for member in tar:
                entries += 1
                if member.name.removeprefix("./") == MANIFEST_NAME and member.isreg():
                    data = tar.extractfile(member)
                    manifest = json.loads(data.read()) if data is not None else None
    except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
        raise ArchiveError(f"{archive} is not a readable .tar.gz ({exc}); it may be truncated or corrupt: rebuild "
                           "it with `conch build` or copy it again") from None
    except ValueError as exc:
        raise ArchiveError(f"{archive}: its {MANIFEST_NAME} is not JSON ({exc}); rebuild it with `conch build`"
                           ) from None
    if not isinstance(manifest, dict):
        raise ArchiveError(f"{archive} has no {MANIFEST_NAME} (not built by conch?); `conch check` checks any "
                           "archive, `conch inspect` needs one built by `conch build`")
    return manifest, entries


def common(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--release", default=DEFAULT_RELEASE, help=f"Triton release YY.MM (default {DEFAULT_RELEASE})")
    sp.add_argument("--only", action="append", help="only this ensemble (repeatable)")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    b = sub.add_parser("build", help="build one MME tarball per ensemble")
    b.add_argument("paths", nargs="+", type=Path, help="ensemble .py files or folders of them")
    b.add_argument("--out", type=Path, default=Path("dist"))
    b.add_argument("--target", choices=[t.value for t in Target], default=Target.PRODUCTION.value)
    b.add_argument("--repo-dir", type=Path, help="also write each repository unpacked here")
    b.add_argument("-j", "--jobs", type=int, default=default_jobs(),
                   help=f"ensembles built at once, one process each (default: every core, here {default_jobs()})")
    b.add_argument("--refresh", action="store_true",
                   help="ask the package index again and recompute sample expected outputs (normally cached)")
    common(b)
    b.set_defaults(func=cmd_build)

    r = sub.add_parser("replay", help="replay sample payloads on a local Triton, loaded as SageMaker MME loads")
    r.add_argument("paths", nargs="+", type=Path, help="ensemble files/folders (built for local) or .tar.gz")
    r.add_argument("--endpoint", action="append", choices=("kserve", "sagemaker-json", "sagemaker-binary"))
    r.add_argument("--load-timeout", type=float, default=300.0, help="seconds before a model load counts as hung")
    common(r)
    r.set_defaults(func=cmd_replay)

    g = sub.add_parser("graph", help="print each ensemble's DAG as Graphviz dot")
    g.add_argument("paths", nargs="+", type=Path)
    common(g)
    g.set_defaults(func=cmd_graph)

    i = sub.add_parser("inspect", help="summarise an archive's manifest")
    i.add_argument("archive", type=Path)
    i.add_argument("--json", action="store_true")
    i.set_defaults(func=cmd_inspect)
