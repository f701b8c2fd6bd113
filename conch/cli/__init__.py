"""`conch build | replay | serve | graph | inspect | run | deploy | invoke | undeploy`: the command line over the
library. Each module of this package registers its own subcommands."""

from __future__ import annotations

import argparse
import signal
from collections.abc import Sequence
from types import FrameType

from conch.cli import deploy, endpoint, local, run
from conch.cli.console import say

# Each module registers its subcommands, in the order `conch --help` lists them.
COMMANDS = (local, endpoint, run, deploy)


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
    except KeyboardInterrupt:
        say("conch: interrupted")
        return 130
