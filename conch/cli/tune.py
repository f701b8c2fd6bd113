"""`conch tune`: settings per step for one ensemble, or several sharing one endpoint, under a p99 target, found
by a guided search on the real server (the local tritonserver, the local MME, or any Triton by --url), reported
round by round, drawn, and written back as a patch to the declaration."""

from __future__ import annotations

import argparse
import json
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

from conch.cli.console import document, progress_bar, result, say
from conch.cli.discovery import local_builds
from conch.cli.flags import Subcommands, add_ensemble_flags, add_python_flags

if TYPE_CHECKING:
    from conch.perf.tune.search import Outcome
    from conch.perf.tune.space import StepSpace
    from conch.perf.tune.trial import TrialServer


def _ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give whole numbers separated by commas, e.g. 0,2000") from None
    if not values or any(v < 0 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: give one or more whole numbers of 0 or more")
    return values


def _mix(text: str) -> dict[str, float] | str:
    """``zipf``, or NAME=WEIGHT,NAME=WEIGHT (weights per TargetModel), or a `conch bench --json` document."""
    if text == "zipf":
        return text
    path = Path(text)
    if path.is_file():
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            counts = {str(t["target_model"]): float(t["requests"]) for t in doc["targets"]}
        except (ValueError, KeyError, TypeError) as exc:
            raise argparse.ArgumentTypeError(f"{path}: not a `conch bench --json` document with targets and their "
                                             f"requests ({exc}); give zipf or NAME=WEIGHT,...") from None
        return counts
    weights: dict[str, float] = {}
    for part in text.split(","):
        name, eq, value = part.partition("=")
        try:
            weights[name.strip()] = float(value)
        except ValueError:
            eq = ""
        if not eq or not name.strip():
            raise argparse.ArgumentTypeError(f"{text!r}: give zipf, NAME=WEIGHT,... (e.g. a.tar.gz=3,b.tar.gz=1) or a "
                             "`conch bench --json` file")
    return weights


def _patches(outcome: Outcome, server: TrialServer, sources: dict[str, Path], out: Path,
             apply: bool) -> dict[str, Any]:
    """The chosen settings as a diff of each declaration that changes; written to ``out``, shown, and applied
    with ``--apply``. A step declared once and used by two ensembles gets the first ensemble's settings."""
    from conch.perf.tune.declaration import patch_declaration

    done: dict[str, Any] = {"files": [], "notes": []}
    diffs = []
    seen: dict[tuple[Path, str], tuple[str, Any]] = {}
    for name, source in sorted(sources.items()):
        chosen: dict[StepSpace, Any] = {}
        for step in server.steps:
            if step.ensemble != name:
                continue
            knobs = outcome.chosen.of(step)
            key = (source.parent.resolve(), step.step)
            if key in seen and seen[key][1] != knobs:
                done["notes"].append(f"step {step.step!r} is declared once and shared by {seen[key][0]} and {name}, "
                                     f"which the tune set differently; the patch keeps {seen[key][0]}'s")
                continue
            seen[key] = (name, knobs)
            if knobs != server.declared.of(step):
                chosen[step] = knobs
        if not chosen:
            continue
        patch = patch_declaration(source, server.steps, chosen)
        for missing in patch.missing:
            done["notes"].append(f"{source.name}: no `...Step({missing!r}, ...)` call found to write {missing}'s "
                                 "settings into; set them by hand")
        if patch.diff:
            diffs.append(patch.diff)
        if apply:
            done["files"] += [str(p) for p in patch.write()]
    text = "".join(diffs)
    if text:
        path = out / "tune.patch"
        path.write_text(text, encoding="utf-8")
        done["patch"] = str(path)
        done["diff"] = text
    return done


def cmd_tune(args: argparse.Namespace) -> int:
    from conch.errors import BenchError
    from conch.perf.tune.report import rounds_png, table, to_json
    from conch.perf.tune.search import guided
    from conch.perf.tune.servers import local_server, remote_server
    from conch.perf.tune.space import Knobs, Levels, Settings
    from conch.perf.tune.trial import latency_target
    from conch.scratch import scratch_temp

    if not args.paths:
        raise BenchError("give the ensembles or archives to tune (.py files, folders, .tar.gz)")
    latency_target(args.p99_ms)
    levels = Levels(args.max_instances, args.delays_us, tuple(tuple(s) for s in args.preferred_sizes or [()]),
                    args.threads or (), args.cpu_budget)
    options = {"p99_ms": args.p99_ms, "max_concurrency": args.max_concurrency,
               "seconds_per_level": args.seconds_per_level}
    failed: list[str] = []
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:  # the servers started here stop when it closes, whatever happened
        tmp = Path(stack.enter_context(scratch_temp("conch-tune-")))
        bar = stack.enter_context(progress_bar("conch tune", None))
        if args.url:
            sources: dict[str, Path] = {}
            server = remote_server(args.url, [Path(p) for p in args.paths], mix=args.mix, progress=bar.note,
                                   **options)
        else:
            archives, sources = local_builds(args, tmp, failed)
            if not archives:
                raise BenchError("nothing to tune: no ensemble built and no archive given")
            server = stack.enter_context(local_server(archives, mode="mme" if args.mme else "triton", mix=args.mix,
                                                      load_timeout=args.load_timeout, progress=bar.note, **options))
        server.only(args.step or [])
        start = Settings({(s.ensemble, s.model): Knobs() for s in server.steps}) if args.from_defaults \
            else server.declared
        try:
            outcome = guided(server, start, levels, budget_s=args.budget_minutes * 60, patience=args.patience,
                             progress=bar.line)
        finally:
            if args.url:  # a server of the user's: its steps go back to the settings they had, whatever happened
                try:
                    server.apply(server.declared)
                except BenchError as exc:
                    say(f"warning: the steps of {args.url} could not be set back to their declared settings: {exc}")
    report = table(outcome, server.steps, args.p99_ms, server.server)
    doc = to_json(outcome, server.steps, args.p99_ms, server.server, levels)
    result(report)
    picture = rounds_png(outcome, out / "tune.png", args.p99_ms)
    say(f"wrote {picture} (the rounds)")
    patch = _patches(outcome, server, sources, out, args.apply)
    if patch.get("diff"):
        result("\nthe declaration with these settings (" + patch["patch"] + ("; applied" if args.apply else
               "; `patch -p1 -d <ensembles folder> < tune.patch` or --apply writes it") + "):\n" + patch["diff"])
    elif sources:
        result("\nthe declaration already has these settings: no patch")
    for note in patch["notes"]:
        say(f"conch: warning: {note}")
    doc["patch"] = patch
    doc["picture"] = str(picture)
    doc["failed"] = failed
    (out / "tune.json").write_text(json.dumps(doc, indent=1), encoding="utf-8")
    document(doc)
    return 2 if failed else 0


def register(sub: Subcommands) -> None:
    p = sub.add_parser("tune", help="settings per step (instances, dynamic batching, threads) for the highest "
                       "throughput under a p99 target, found by a guided search on the real server and written "
                       "back as a patch to the declaration")
    add_python_flags(p)
    p.add_argument("paths", nargs="*", help="ensemble files/folders (built for local) or .tar.gz archives; several "
                   "share one endpoint")
    p.add_argument("--p99-ms", type=float, default=1000.0, help="the latency target: p99 in ms (default 1000)")
    p.add_argument("--budget-minutes", type=float, default=10.0, help="stop searching after this long (default 10)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--mme", action="store_true", help="through the local MME's SageMaker runtime front (default: "
                       "the local tritonserver, every archive loaded as SageMaker loads it)")
    where.add_argument("--url", help="a running Triton (KServe v2 HTTP, explicit model control) with the archives' "
                       "ensembles loaded, e.g. a GPU box; give the archives for their samples and step names")
    p.add_argument("--mix", type=_mix, help="traffic mix over several archives: zipf, NAME=WEIGHT,... or a `conch "
                   "bench --json` file (its requests per TargetModel); default: even")
    p.add_argument("--from-defaults", action="store_true", help="start from one instance per step, no dynamic "
                   "batching and the backends' default threads, not from the declaration's settings")
    p.add_argument("--patience", type=int, default=3, help="after this many changes in a row that did not help "
                   "(default 3; 0: try every change the figures point to), make the last tries, then stop")
    p.add_argument("--step", action="append", help="tune only this step (its declared name, or TargetModel/step; "
                   "repeatable); the others keep their settings")
    p.add_argument("--max-instances", type=int, default=0, help="most instances per step (default: the cores, at "
                   "least 2)")
    p.add_argument("--delays-us", type=_ints, default=(0, 2000), help="max queue delays dynamic batching may use "
                   "(default 0,2000)")
    p.add_argument("--preferred-sizes", type=_ints, action="append", help="a preferred_batch_size list batching may "
                   "use, e.g. 4,8 (repeatable; default: none, Triton batches what is queued)")
    p.add_argument("--threads", type=_ints, help="thread counts a backend with thread settings may use (default 1 "
                   "up to the cores)")
    p.add_argument("--cpu-budget", type=int, default=0, help="instances x threads over every step of every ensemble "
                   "(default: twice the cores, at least 4)")
    p.add_argument("--max-concurrency", type=int, default=16, help="highest concurrency a trial climbs to "
                   "(default 16)")
    p.add_argument("--seconds-per-level", type=float, default=2.0, help="about how long each concurrency level "
                   "sends (default 2)")
    p.add_argument("--out", type=Path, default=Path("tune"), help="folder for tune.png, tune.patch and tune.json "
                   "(default ./tune)")
    p.add_argument("--apply", action="store_true", help="also write the patch into the ensemble files")
    p.add_argument("--load-timeout", type=float, default=300.0, help="seconds before a model load counts as hung")
    add_ensemble_flags(p)
    p.set_defaults(func=cmd_tune)
