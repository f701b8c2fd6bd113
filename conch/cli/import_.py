"""`conch import`: hand-written model repositories and MME archives into conch declarations."""

from __future__ import annotations

import argparse
from pathlib import Path

from conch.cli.console import document, result, say
from conch.cli.flags import Subcommands


def cmd_import(args: argparse.Namespace) -> int:
    from conch.importer.convert import describe, import_sources

    done = import_sources(args.sources, args.out, copy_files=args.copy_files, strict=args.strict,
                          samples=not args.no_sample, say=say)
    for imported in done:
        result(f"wrote {imported.module}: ensemble {imported.ensemble!r}; its rebuild holds "
               f"{imported.configs_equal} equal config(s) and {imported.files_identical} identical file(s)")
        if imported.sample:
            result(f"  sample: {imported.sample}")
        for message in imported.messages:
            result(f"  warning: {message}")
    document({"imported": [describe(i) for i in done]})
    return 0


def register(sub: Subcommands) -> None:
    p = sub.add_parser(
        "import", help="write Python declarations for existing model repositories or MME .tar.gz archives",
        description="Read model repository folders or MME .tar.gz archives (hand-made or conch-built) and write "
                    "one Python module per ensemble that `conch build` turns back into the same archive. Each "
                    "module is built in memory and compared with its source; what cannot be declared is named.")
    p.add_argument("sources", nargs="+", type=Path, metavar="SOURCE",
                   help="a model repository folder or an MME .tar.gz (archives are unpacked beside the modules)")
    p.add_argument("--out", type=Path, required=True,
                   help="FILE.py for one ensemble, or a folder for one module per ensemble")
    p.add_argument("--copy-files", action="store_true",
                   help="copy a repository folder beside the modules instead of referring to its files in place")
    p.add_argument("--strict", action="store_true",
                   help="fail, writing no module, when anything of the sources cannot be declared")
    p.add_argument("--no-sample", action="store_true",
                   help="do not capture a sample on the local tritonserver")
    p.set_defaults(func=cmd_import)
