"""`conch build`: one SageMaker MME archive per ensemble, built on this machine (several at once, one process each)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from conch import ledger
from conch.cli.console import document, error, progress_bar, quiet_mode, say, session
from conch.cli.flags import Subcommands

if TYPE_CHECKING:
    from conch.builder.capture import CapturedOutput
    from conch.builder.parallel import BuildOutcome


def unchanged_again(argv: Sequence[str]) -> int | None:
    """`conch build` answered from its ledger: when this exact command ran before, every input it read is as it
    was and every archive it wrote is untouched, say what its unchanged build said and return 0, without
    importing the ensemble files, numpy or the builder. Otherwise None (and this run is traced, to be the
    ledger the next run reads)."""
    start = time.perf_counter()
    replay = ledger.unchanged(argv)
    if replay is None:
        ledger.start(argv)
        return None
    try:
        rows = replay["ensembles"]
        seconds = (time.perf_counter() - start) / max(len(rows), 1)
        lines = list(replay["lines"])
        for index, row in enumerate(rows, 1):
            lines.extend(row["said"])
            lines.append(_unchanged_line(index, len(rows), row["archive"], seconds))
            if row["output"]:  # what the ensemble's code said (conch.builder.capture loaded only then)
                from conch.builder.capture import CapturedOutput

                output = [CapturedOutput(c["what"], tuple(c["warnings"]), tuple(c["lines"])) for c in row["output"]]
                lines.extend(_output_lines(row["ensemble"], output, replay["verbose"]))
        doc = json.loads(replay["document"])  # a string: the ledger's JSON sorts keys, the document keeps its order
        for entry in doc["ensembles"]:
            entry["seconds"] = round(seconds, 3)
        flags = argparse.Namespace(json_output=bool(replay["json"]), quiet=bool(replay["quiet"]))
    except (KeyError, TypeError, ValueError, AttributeError):  # a ledger of another shape: build as usual
        ledger.start(argv)
        return None
    try:
        with session(flags):
            for line in lines:
                say(line)
            document(doc)
    except BrokenPipeError:  # the reader stopped early, as the ordinary command handles it (conch.cli._run)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return 0


def _unchanged_line(index: int, total: int, archive: object, seconds: float) -> str:
    return f"[{index}/{total}] unchanged {archive} ({seconds:.2f} s)"


def cmd_build(args: argparse.Namespace) -> int:
    from conch.builder.discover import Shard, locate
    from conch.builder.parallel import BuildJob, build_all, default_jobs
    from conch.cli.discovery import skipping

    shard = Shard.parse(args.shard) if args.shard else None  # a bad K/N stops before anything is imported
    failed: list[str] = []
    with watching_prints():  # a file that prints when imported would not print on a replay
        found = locate(args.paths, on_error=skipping(failed))
    total = len(found) + len(failed)  # a file that does not load counts as one failed ensemble (in every shard)
    if args.only:
        found = [(file, e) for file, e in found if e.name in set(args.only)]
    if not found and not failed:
        say("conch: error: no ensembles found; give .py files that declare conch.Ensemble objects at module level")
        return 2
    lines: list[str] = []  # what this command said before building, for its ledger
    if shard is not None:
        lines.append(f"shard {shard}: {sum(shard.holds(e.name) for _, e in found)} of the {len(found)} ensembles "
                     "found")
        say(lines[-1])
        found = [(file, e) for file, e in found if shard.holds(e.name)]
    jobs = [BuildJob(file, e.name, args.out, args.target, args.release, args.refresh, args.repo_dir)
            for file, e in found]
    finished: list[BuildOutcome] = []
    said: dict[str, list[str]] = {}  # what each ensemble's build said, for the ledger

    with progress_bar("building", len(jobs)) as bar:
        def done(outcome: BuildOutcome) -> None:  # one ensemble that cannot build does not stop the others
            finished.append(outcome)
            said[outcome.ensemble] = ledger.absorb(outcome.inputs) + ledger.take_said()
            bar.advance()
            count = f"[{len(finished)}/{len(jobs)}]"
            if outcome.error is not None or outcome.archive is None:
                error(str(outcome.error))
            elif outcome.written:
                say(f"{count} built {outcome.archive} ({outcome.archive.stat().st_size / 1e6:.1f} MB, "
                    f"{args.target}, release {args.release}, {outcome.seconds:.1f} s)")
            else:
                say(_unchanged_line(len(finished), len(jobs), outcome.archive, outcome.seconds))
            _say_output(outcome.ensemble, outcome.output, args.verbose)

        def note(message: str) -> None:
            ledger.said(message)
            bar.note(message)

        # under --quiet no progress at all, so parallel workers print none either
        workers = default_jobs() if args.jobs is None else args.jobs
        outcomes = build_all(jobs, workers, done, progress=None if quiet_mode() else note) if jobs else []
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
    _keep_ledger(args, outcomes, failed, lines, said, doc)
    if failed:
        say(f"conch: {len(failed)} of {total} ensembles failed to build: {', '.join(failed)}")
        return 2
    return 0


def _say_output(ensemble: str, output: Sequence[CapturedOutput], verbose: bool) -> None:
    """What the ensemble's code said while it was built: one line, or everything with ``-v``."""
    for line in _output_lines(ensemble, output, verbose):
        say(line)


def _output_lines(ensemble: str, output: Sequence[CapturedOutput], verbose: bool) -> list[str]:
    from conch.builder.capture import summary

    if not verbose:
        line = summary(ensemble, output)
        return [line] if line else []
    return [f"--- {ensemble}: {said.what}\n{said.text()}" for said in output]


def _keep_ledger(args: argparse.Namespace, outcomes: Sequence[BuildOutcome], failed: list[str], lines: list[str],
                 said: dict[str, list[str]], doc: dict[str, Any]) -> None:
    """The ledger of this command, when the next run of it can be answered from one: every ensemble built and
    unchanged (what an unchanged build says is only known once one ran), no --refresh (it always builds) and no
    --repo-dir (it writes the folders again each time)."""
    if not ledger.recording():
        return
    if failed or not outcomes:
        ledger.doubt("a build failed")
    if any(o.written for o in outcomes):
        ledger.doubt("an archive was written: the next unchanged build keeps the ledger")
    if args.refresh or args.repo_dir is not None:
        ledger.doubt("--refresh and --repo-dir always build")
    replay = {"json": bool(args.json_output), "quiet": bool(args.quiet), "verbose": bool(args.verbose),
              "lines": lines, "document": json.dumps(doc, default=str),
              "ensembles": [{"ensemble": o.ensemble, "archive": str(o.archive), "said": said.get(o.ensemble, []),
                             "output": [c.to_json() for c in o.output]} for o in outcomes]}
    try:
        ledger.finish(replay, [str(o.archive) for o in outcomes if o.archive is not None])
    except Exception as exc:  # a ledger only saves time: the build itself succeeded
        ledger.stop()
        say(f"warning: no ledger kept for this command ({exc}); its next run builds as usual")


class _Watched:
    """A stream that notes whether anything was written to it (then no ledger: a replay would not say it)."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        if text:
            ledger.doubt("the ensemble files printed while imported")
        return int(self._stream.write(text))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class watching_prints:
    """While the ensemble files are imported (to check extras, then to build), writes to sys.stdout and sys.stderr
    are noted (see _Watched)."""

    def __enter__(self) -> None:
        self._saved = sys.stdout, sys.stderr
        if ledger.recording():
            sys.stdout, sys.stderr = _Watched(sys.stdout), _Watched(sys.stderr)

    def __exit__(self, *exc: object) -> None:
        sys.stdout, sys.stderr = self._saved


def register(sub: Subcommands) -> None:
    from conch.cli.flags import add_ensemble_flags
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
                   help="ask the package index again, recompute sample expected outputs, derive what conch "
                   "remembers of steps (PyTorch bindings, DALI pipelines) and run the warmup and samples "
                   "in-process again (all normally cached). Without it, a command run before with every file it "
                   "read at Python level unchanged (its ledger: files opened, folders listed, modules loaded, "
                   "the environment) answers 'unchanged' without importing the ensemble files; a file read "
                   "only by native code (e.g. a Rust tokenizer) is not traced: --refresh after changing one "
                   "(docs/commands.md)")
    b.add_argument("-v", "--verbose", action="store_true",
                   help="show the warnings and output of the ensembles' own code (exports, expected outputs) in "
                        "full, not one line per ensemble")
    add_ensemble_flags(b)
    b.set_defaults(func=cmd_build)
