"""`conch check ARCHIVE…`: check MME archives as SageMaker's Triton front end and Triton will read them."""

from __future__ import annotations

import argparse
from pathlib import Path

from conch.cli.console import document, error, progress_bar, result, say


def cmd_check(args: argparse.Namespace) -> int:
    from conch.builder.check import CheckReport, check_archive

    archives: list[Path] = []
    for path in args.archives:
        archives.extend(sorted(path.glob("*.tar.gz")) if path.is_dir() else [path])
    if not archives:
        say(f"conch: error: no .tar.gz archives in {', '.join(map(str, args.archives))}; give archive files")
        return 2
    reports: list[CheckReport] = []
    with progress_bar("checking", len(archives)) as bar:
        for archive in archives:
            reports.append(check_archive(archive))
            result("\n".join(reports[-1].lines()))
            bar.advance()
    failed = [r for r in reports if not r.ok]
    for report in failed:  # what --quiet still shows; the findings above name each file
        error(report.summary())
    if failed:
        say(f"conch: {len(failed)} of {len(archives)} archives fail the check")
    document({"ok": not failed, "archives": [
        {"archive": str(path), "ok": r.ok, "ensemble": r.ensemble, "models": r.models,
         "findings": [{"level": f.level, "file": f.file, "message": f.message} for f in r.findings]}
        for path, r in zip(archives, reports, strict=True)]})
    return 1 if failed else 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    c = sub.add_parser("check", help="check MME archives (conch-built or hand-made) as SageMaker and Triton read them")
    c.add_argument("archives", nargs="+", type=Path, help=".tar.gz archives, or folders of them")
    c.set_defaults(func=cmd_check)
