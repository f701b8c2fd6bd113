"""`conch build | replay | graph | inspect`: the commands that work on this machine alone."""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Sequence
from pathlib import Path

from conch.builder.parallel import default_jobs
from conch.cli.console import say
from conch.ensembles.target import DEFAULT_RELEASE


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

    found = locate(args.paths)
    if args.only:
        found = [(file, e) for file, e in found if e.name in set(args.only)]
    if not found:
        say("conch: no ensembles found")
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

    outcomes = build_all(jobs, args.jobs, done, progress=say)
    failed = [o.ensemble for o in outcomes if o.error is not None]
    if failed:
        say(f"conch: {len(failed)} of {len(jobs)} ensembles failed to build: {', '.join(failed)}")
        return 2
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    from conch.builder.build import build_ensemble
    from conch.builder.discover import discover
    from conch.harness.replay import replay_archives

    archives, sources = split_sources(args.paths)
    with tempfile.TemporaryDirectory(prefix="conch-replay-") as tmp:
        if sources:
            for ensemble in discover(sources):
                if args.only and ensemble.name not in args.only:
                    continue
                say(f"building {ensemble.name} (local target, release {args.release})")
                archives.append(build_ensemble(ensemble, Path(tmp), "local", args.release, progress=say))
        if not archives:
            say("conch: nothing to replay (give ensemble files, folders, or .tar.gz archives)")
            return 2
        report = replay_archives(
            archives, endpoints=args.endpoint or ("kserve", "sagemaker-json", "sagemaker-binary"),
            load_timeout=args.load_timeout, progress=say,
        )
    print(report.table())
    return 0 if report.passed else 1


def cmd_graph(args: argparse.Namespace) -> int:
    from conch.builder.discover import discover

    for ensemble in discover(args.paths):
        if not args.only or ensemble.name in args.only:
            print(ensemble.graph_dot())
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    import tarfile

    from conch.builder.manifest import MANIFEST_NAME

    with tarfile.open(args.archive) as tar:
        member = tar.extractfile(MANIFEST_NAME)
        if member is None:
            say(f"conch: {args.archive} has no {MANIFEST_NAME}")
            return 2
        manifest = json.load(member)
        names = tar.getnames()
    if args.json:
        print(json.dumps(manifest, indent=1, sort_keys=True))
        return 0
    print(f"ensemble {manifest['ensemble']}  target {manifest['target']}  release {manifest['release']} "
          f"(stub Python {manifest['stub_python']})")
    for io in ("inputs", "outputs"):
        for t in manifest["schema"][io]:
            print(f"  {io[:-1]:6} {t['name']:24} {t['datatype']:6} {t['shape']}")
    for step in manifest["steps"]:
        print(f"  step   {step['model_name']:24} {step['served_as']}")
    print(f"  {len(manifest['samples'])} samples, {len(names)} archive entries")
    return 0


def common(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--release", default=DEFAULT_RELEASE, help=f"Triton release YY.MM (default {DEFAULT_RELEASE})")
    sp.add_argument("--only", action="append", help="only this ensemble (repeatable)")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    b = sub.add_parser("build", help="build one MME tarball per ensemble")
    b.add_argument("paths", nargs="+", type=Path, help="ensemble .py files or folders of them")
    b.add_argument("--out", type=Path, default=Path("dist"))
    b.add_argument("--target", choices=("production", "local"), default="production")
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
