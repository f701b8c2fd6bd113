"""`conch graph`: pictures of ensembles' DAGs, as dot or Mermaid text or as SVG/PNG files."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from conch.cli.console import document, result, say
from conch.cli.flags import Subcommands


def cmd_graph(args: argparse.Namespace) -> int:
    from conch.builder.discover import discover
    from conch.diagram import RENDERED, SUFFIX, GraphvizMissing, picture

    ensembles = [e for e in discover(args.paths) if not args.only or e.name in args.only]
    if not ensembles:
        say("conch: error: no ensembles found; give .py files that declare conch.Ensemble objects at module level")
        return 2
    if args.format in RENDERED and args.out is None:
        args.out = Path(".")
    shown: list[dict[str, Any]] = []
    missing: GraphvizMissing | None = None
    for ensemble in ensembles:
        fmt, data, why = picture(ensemble.graph(), args.format)
        missing = missing or why
        entry: dict[str, Any] = {"ensemble": ensemble.name, "format": args.format}
        if args.format in RENDERED:
            entry["rendered"] = why is None
        if args.out is None:  # dot or Mermaid text
            entry["text"] = data.decode()
            result(entry["text"])
        else:
            path = args.out / f"{ensemble.name}{SUFFIX[fmt]}"
            args.out.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            entry["path"] = str(path)
            say(f"wrote {path}")
        shown.append(entry)
    if missing is not None:
        say(f"conch: warning: {missing}; wrote the dot text instead (.dot files: `dot -T{args.format} FILE.dot` "
            "renders one where the Graphviz binary is installed, e.g. apt-get install graphviz)")
    document({"graphs": shown, **({"warning": str(missing)} if missing else {})})
    return 0


def register(sub: Subcommands) -> None:
    from conch.diagram import FORMATS

    g = sub.add_parser("graph", help="draw each ensemble's DAG: dot or Mermaid text, or SVG/PNG files")
    g.add_argument("paths", nargs="+", type=Path, help="ensemble .py files or folders of them")
    g.add_argument("--format", choices=FORMATS, default="dot",
                   help="dot (default) and mermaid print text (or write <ensemble>.dot/.mmd with --out); svg and "
                        "png write <ensemble>.svg/.png into --out (default: this folder)")
    g.add_argument("--out", type=Path, help="folder for one file per ensemble")
    g.add_argument("--only", action="append", help="only this ensemble (repeatable)")
    g.set_defaults(func=cmd_graph)
