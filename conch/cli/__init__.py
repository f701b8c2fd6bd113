"""`conch build | replay | serve | graph | inspect | check | run | deploy | invoke | undeploy | bench | plan`:
the command line over the library. Each module of this package registers its own subcommands."""

from __future__ import annotations

import argparse
import os
import signal
from collections.abc import Sequence
from types import FrameType

from conch.cli import bench, check, deploy, endpoint, local, run
from conch.cli.console import say

# Each module registers its subcommands, in the order `conch --help` lists them.
COMMANDS = (local, endpoint, check, run, deploy, bench)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="conch", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    for module in COMMANDS:
        module.register(sub)
    return p


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # unwinds through `finally`, so servers are stopped


def main(argv: Sequence[str] | None = None) -> int:
    from conch.errors import ConchError

    args = parser().parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    try:
        return int(args.func(args))
    except ConchError as exc:
        say(f"conch: error: {exc}")
        return 2
    except OSError as exc:  # a path that does not exist, a folder that cannot be written, a full disk
        say(f"conch: error: {exc.filename or ''}{': ' if exc.filename else ''}{exc.strerror or exc}; check the "
            "path and its permissions")
        return 2
    except KeyboardInterrupt:
        say("conch: interrupted")
        return 130
    except Exception as exc:
        if os.environ.get("CONCH_TRACEBACK"):
            raise
        say(f"conch: error: {type(exc).__name__}: {exc} (a conch bug, or a case it does not handle yet: run again "
            "with CONCH_TRACEBACK=1 and report the traceback)")
        return 2
