"""`conch check ARCHIVE…`: check MME archives as SageMaker's Triton front end and Triton will read them."""

from __future__ import annotations

import argparse
from pathlib import Path

from conch.cli.console import say


def cmd_check(args: argparse.Namespace) -> int:
    from conch.builder.check import check_archive

    archives: list[Path] = []
    for path in args.archives:
        archives.extend(sorted(path.glob("*.tar.gz")) if path.is_dir() else [path])
    if not archives:
        say(f"conch: error: no .tar.gz archives in {', '.join(map(str, args.archives))}; give archive files")
        return 2
    failed = 0
    for archive in archives:
        report = check_archive(archive)
        for line in report.lines():
            print(line)
        failed += not report.ok
    if failed:
        say(f"conch: {failed} of {len(archives)} archives fail the check")
    return 1 if failed else 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    c = sub.add_parser("check", help="check MME archives (conch-built or hand-made) as SageMaker and Triton read them")
    c.add_argument("archives", nargs="+", type=Path, help=".tar.gz archives, or folders of them")
    c.set_defaults(func=cmd_check)
