"""`conch inspect`: an archive's tree, model configs, environments, warmup and shared memory, and its check."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from conch.cli.console import say
from conch.cli.flags import Subcommands


def cmd_inspect(args: argparse.Namespace) -> int:
    from conch.archive.inspection import inspect_archive

    found = inspect_archive(args.archive)
    if args.json:
        print(json.dumps(found.to_json(), indent=1, sort_keys=True))
    elif not args.quiet:
        print("\n".join(found.lines()))
    if not found.ok:
        say(f"conch: {found.check.summary()}")
    return 0 if found.ok else 1


def register(sub: Subcommands) -> None:
    i = sub.add_parser("inspect", help="an archive's tree, model configs, environments, warmup and shared memory, "
                       "and its `conch check` (exit 1 when the check fails)")
    i.add_argument("archive", type=Path, help="a .tar.gz archive built by `conch build` (or a hand-made one)")
    out = i.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="everything as one JSON object (manifest included)")
    out.add_argument("--quiet", "-q", action="store_true", help="print nothing; the exit code tells")
    i.set_defaults(func=cmd_inspect)
