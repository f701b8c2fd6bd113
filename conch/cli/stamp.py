"""`conch stamp ARCHIVE --as NAME… --out DIR`: one archive under many TargetModel names, each with step model
names of its own (conch.builder.stamping), ready to upload side by side under one S3 prefix."""

from __future__ import annotations

import argparse
from pathlib import Path

from conch.cli.console import document, result, say
from conch.cli.flags import Subcommands


def cmd_stamp(args: argparse.Namespace) -> int:
    from conch.builder.stamping import stamp_archives

    stamped = stamp_archives(args.archive, args.names, args.out)
    lines = []
    for s in stamped:
        lines.append(f"{s.archive}  TargetModel={s.target_model}")
        lines += [f"  step {old} -> {new}" for old, new in sorted(s.steps.items())]
        if not s.manifest and s.steps:  # a single-model archive has no step names to record
            say(f"conch: warning: {s.source.name} has no conch manifest, so {s.archive.name} does not record the "
                "original step names (stamping it again stamps the stamped names)")
    result("\n".join(lines))
    document({"source": str(args.archive), "archives": [
        {"archive": str(s.archive), "target_model": s.target_model, "steps": dict(s.steps)} for s in stamped]})
    return 0


def register(sub: Subcommands) -> None:
    s = sub.add_parser("stamp", help="copy an archive under new TargetModel names, each with step names of its own "
                       "(copies and versions on one MME do not reload each other)")
    s.add_argument("archive", type=Path, help="a .tar.gz archive that passes `conch check`")
    s.add_argument("--as", dest="names", action="append", required=True, metavar="NAME",
                   help="TargetModel name (repeatable); writes DIR/NAME.tar.gz")
    s.add_argument("--out", type=Path, required=True, help="folder for the stamped archives")
    s.set_defaults(func=cmd_stamp)
