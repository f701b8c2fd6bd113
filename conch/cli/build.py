"""`conch build`: one SageMaker MME archive per ensemble, built on this machine (several at once, one process each)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from conch.cli.console import document, error, progress_bar, quiet_mode, say
from conch.cli.flags import Subcommands

if TYPE_CHECKING:
    from conch.builder.capture import CapturedOutput
    from conch.builder.parallel import BuildOutcome


def cmd_build(args: argparse.Namespace) -> int:
    from conch.builder.discover import Shard, locate
    from conch.builder.parallel import BuildJob, build_all, default_jobs
    from conch.cli.discovery import skipping

    shard = Shard.parse(args.shard) if args.shard else None  # a bad K/N stops before anything is imported
    failed: list[str] = []
    found = locate(args.paths, on_error=skipping(failed))
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
            for line in _output_lines(outcome.ensemble, outcome.output, args.verbose):
                say(line)

        # under --quiet no progress at all, so parallel workers print none either
        workers = default_jobs() if args.jobs is None else args.jobs
        outcomes = build_all(jobs, workers, done, progress=None if quiet_mode() else bar.note) if jobs else []
    failed += [o.ensemble for o in outcomes if o.error is not None]
    doc = {
        "target": args.target, "release": args.release, "out": str(args.out), "ok": not failed, "failed": failed,
        "shard": str(shard) if shard else None,
        "ensembles": [{"ensemble": o.ensemble, "archive": None if o.archive is None else str(o.archive),
                       "written": o.written, "bytes": None if o.archive is None else o.archive.stat().st_size,
                       "seconds": round(o.seconds, 3), "error": o.error,
                       "output": [c.to_json() for c in o.output]} for o in outcomes],
    }
    document(doc)
    if failed:
        say(f"conch: {len(failed)} of {total} ensembles failed to build: {', '.join(failed)}")
        return 2
    return 0


def _output_lines(ensemble: str, output: Sequence[CapturedOutput], verbose: bool) -> list[str]:
    """What the ensemble's code said while it was built: one line, or everything with ``-v``."""
    from conch.builder.capture import summary

    if not verbose:
        line = summary(ensemble, output)
        return [line] if line else []
    return [f"--- {ensemble}: {said.what}\n{said.text()}" for said in output]


def register(sub: Subcommands) -> None:
    from conch.cli.flags import add_ensemble_flags, add_python_flags
    from conch.ensembles.target import Target

    b = sub.add_parser("build", help="build one MME tarball per ensemble")
    b.add_argument("paths", nargs="+", type=Path, help="ensemble .py files or folders of them")
    b.add_argument("--out", type=Path, default=Path("dist"), help="folder for the .tar.gz archives (default dist)")
    b.add_argument("--target", choices=[t.value for t in Target], default=Target.PRODUCTION.value,
                   help="production (default): the archives SageMaker serves; local: every step with a CPU "
                        "stand-in, for `conch replay` and `conch serve` on this machine")
    b.add_argument("--repo-dir", type=Path, help="also write each repository unpacked here")
    b.add_argument("-j", "--jobs", type=int,  # the default is counted when building, not at every start
                   help="ensembles built at once, one process each (default: every core this process may run on)")
    b.add_argument("--shard", metavar="K/N", help="build only shard K of N (1 <= K <= N), split by ensemble name: "
                   "N jobs with the same sources build every ensemble once (docs/ci-matrix.md)")
    b.add_argument("--refresh", action="store_true",
                   help="ask the package index again and derive again what conch remembers by content (PyTorch "
                   "bindings, DALI CPU checks, step checks, the in-process run of pure steps) and what functions "
                   "declared pure=True computed (docs/declare.md, \"What a build remembers\"); user code not "
                   "declared pure runs at every build anyway")
    b.add_argument("-v", "--verbose", action="store_true",
                   help="show the warnings and output of the ensembles' own code (exports, expected outputs) in "
                        "full, not one line per ensemble")
    add_ensemble_flags(b)
    add_python_flags(b)  # the warmup and shared-memory sizing run each Python step on the release's Python
    b.set_defaults(func=cmd_build)
