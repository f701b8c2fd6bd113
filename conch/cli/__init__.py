"""`conch build | replay | serve | graph | inspect | check | stamp | run | deploy | invoke | undeploy | bench | plan`:
the command line over the library. Each module of this package registers its own subcommands."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence
from types import FrameType

from conch.cli import bench, check, deploy, endpoint, graph, local, run, stamp
from conch.cli.console import add_output_flags, error, quiet_tensorflow, say, session, startup_lines_filtered

# Each module registers its subcommands, in the order `conch --help` lists them.
COMMANDS = (local, graph, endpoint, check, stamp, run, deploy, bench)
# Commands whose output flags are their own (`conch inspect --json` prints the manifest itself).
OWN_OUTPUT = ("inspect",)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="conch", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    for module in COMMANDS:
        module.register(sub)
    for name, command in sub.choices.items():
        if name not in OWN_OUTPUT:
            add_output_flags(command)
    return p


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # unwinds through `finally`, so servers are stopped


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    with quiet_tensorflow(), startup_lines_filtered(), session(args):  # before anything imports TensorFlow
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    from conch.errors import ConchError

    try:
        return int(args.func(args))
    except ConchError as exc:
        error(str(exc))
        return 2
    except BrokenPipeError:  # the reader of stdout stopped early (`conch graph ... | head`): not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit's flush does not fail again
        return 1
    except OSError as exc:  # a path that does not exist, a folder that cannot be written, a full disk
        error(f"{exc.filename or ''}{': ' if exc.filename else ''}{exc.strerror or exc}; check the path and its "
              "permissions")
        return 2
    except KeyboardInterrupt:
        say("conch: interrupted")
        return 130
    except Exception as exc:
        if os.environ.get("CONCH_TRACEBACK"):
            raise
        error(f"{type(exc).__name__}: {exc} (a conch bug, or a case it does not handle yet: run again with "
              "CONCH_TRACEBACK=1 and report the traceback)")
        return 2
