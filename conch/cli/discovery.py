"""The ensembles and archives a command is given: the ensembles of each file that loads, each file that does not
reported in one line (`conch: error: ...`) while the others carry on."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from conch.cli.console import say
from conch.errors import ConchError


def local_builds(args: argparse.Namespace, tmp: Path, failed: list[str]) -> tuple[list[Path], dict[str, Path]]:
    """The archives of ``args.paths`` and its ensembles built for the local target into ``tmp`` (``args.only``
    kept, ``args.release``), with the file that declares each built one; an ensemble that does not build is
    reported, added to ``failed``, and the others carry on."""
    from conch.builder.discover import locate, sort_paths
    from conch.builder.repository_build import build_ensemble

    given = sort_paths(args.paths, must_exist=True)
    archives = [a for a in given.archives if not args.only or a.name.removesuffix(".tar.gz") in args.only]
    sources: dict[str, Path] = {}
    for file, ensemble in locate(given.sources, skipping(failed)) if given.sources else []:
        if args.only and ensemble.name not in args.only:
            continue
        say(f"building {ensemble.name} (local target, release {args.release})")
        try:
            archive = build_ensemble(ensemble, tmp, "local", args.release, progress=say)
        except ConchError as exc:
            say(f"conch: error: {exc}")
            failed.append(ensemble.name)
            continue
        archives.append(archive)
        sources[archive.name] = Path(file)
    return archives, sources


def skipping(failed: list[str]) -> Callable[[ConchError], None]:
    """An ``on_error`` for discovery: say the error in one line, note the file as failed, carry on."""
    def skip(exc: ConchError) -> None:
        say(f"conch: error: {one_line(exc)}")
        failed.append(str(exc).split(":", 1)[0])

    return skip


def one_line(text: object) -> str:
    return " ".join(str(text).split())


def bench_archives(paths: list[Path]) -> list[Path]:
    """The archives given to `conch bench` or `conch plan --measure`: .tar.gz files, or folders of them."""
    from conch.builder.discover import sort_paths

    return sort_paths(paths, archives_for="bench", must_exist=True).archives
