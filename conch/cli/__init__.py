"""The `conch` command line: one module per command, named after it, registers that command (COMMANDS; `conch
import` is import_.py), and each command gets the output flags, its one-line description and an example line
(EXAMPLES) here. What several commands share is in modules named for it: console (output), flags, discovery (the
files given), profiling (`--profile` inside replay and bench) and extras (optional packages)."""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import signal
import sys
from collections.abc import Sequence
from types import FrameType
from typing import TYPE_CHECKING, Any

from conch.cli.console import add_output_flags, error, quiet_tensorflow, say, session, startup_lines_filtered
from conch.cli.flags import add_exposure_flag

if TYPE_CHECKING:
    from conch.cli.flags import Subcommands

# Each command's module registers it (named after it; `import` is import_.py), in the order `conch --help` lists
# them. A command line imports the module of its own command only (`conch build` none of the others).
COMMANDS = ("build", "replay", "inspect", "graph", "serve", "check", "stamp", "run", "deploy", "invoke", "undeploy",
            "bench", "plan", "profile", "tune", "import")
# Commands that start a local tritonserver: they take --allow-exposed-triton (conch.triton.network_namespace).
STARTS_TRITON = ("replay", "serve", "bench", "profile", "tune", "import")
# Commands whose output flags are their own (`conch inspect --json` prints the manifest itself).
OWN_OUTPUT = ("inspect",)

# What `conch --help` opens with: for users.
DESCRIPTION = """\
conch turns NVIDIA Triton ensembles declared in Python into checked Triton model repositories and one
SageMaker multi-model-endpoint (MME) archive per ensemble, and proves each archive on a real local
tritonserver before anything is deployed.

first steps:
  conch build ensembles/ --target local --out dist/   build every ensemble of a folder for this machine
  conch replay dist/                                  replay their sample payloads on a local Triton
  conch serve dist/                                   a local MME to call with boto3

`conch COMMAND --help` shows each command's options and an example."""

# One example line per command, shown at the end of `conch COMMAND --help` (a new command adds one line here).
EXAMPLES = {
    "build": "conch build ensembles/ --target local --out dist/",
    "replay": "conch replay dist/",
    "inspect": "conch inspect dist/text_embeddings.tar.gz",
    "graph": "conch graph ensembles/text_embeddings.py --format mermaid",
    "serve": "conch serve dist/ --port 8080",
    "check": "conch check dist/",
    "stamp": "conch stamp dist/text_embeddings.tar.gz --as customer-a --as customer-b --out stamped/",
    "run": "conch run ensembles/text_embeddings.py --sample 'one sentence, non-ASCII'",
    "deploy": "conch deploy dist/ --bucket my-bucket --role arn:aws:iam::123456789012:role/SageMakerRole "
              "--endpoint my-mme --dry-run",
    "invoke": "conch invoke --endpoint my-mme --archive dist/text_embeddings.tar.gz",
    "undeploy": "conch undeploy --endpoint my-mme",
    "bench": "conch bench dist/ --mme --stages quick",
    "plan": "conch plan --ensembles 200 --rps 50 --measure dist/text_embeddings.tar.gz",
    "profile": "conch profile dist/text_embeddings.tar.gz --format png --out profile/",
    "tune": "conch tune ensembles/text_embeddings.py --p99-ms 500 --budget-minutes 10",
    "import": "conch import model_repository/ --out ensembles/imported.py",
}


def parser(only: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser: every command, or only ``only`` when it is one (its arguments parse
    the same; `conch --help` and a misspelt command list them all)."""
    p = argparse.ArgumentParser(prog="conch", description=DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in [only] if only in COMMANDS else COMMANDS:
        importlib.import_module(f"conch.cli.{'import_' if name == 'import' else name}").register(_Described(sub))
    for name, command in sub.choices.items():
        if name not in OWN_OUTPUT:
            add_output_flags(command)
        if name in STARTS_TRITON:
            add_exposure_flag(command)
        if name in EXAMPLES:
            command.epilog = f"example:\n  {EXAMPLES[name]}"
            command.formatter_class = argparse.RawDescriptionHelpFormatter
    return p


class _Described:
    """``add_subparsers()`` as the commands see it: a command without a description of its own is described
    by the line `conch --help` lists it with."""

    def __init__(self, sub: Subcommands) -> None:
        self.sub = sub

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        if kwargs.get("description") is None and kwargs.get("help"):
            kwargs["description"] = kwargs["help"]
        return self.sub.add_parser(name, **kwargs)


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # unwinds through `finally`, so servers are stopped


def main(argv: Sequence[str] | None = None) -> int:
    """The `conch` command (``argv`` None: this process's command line)."""
    line = list(sys.argv[1:] if argv is None else argv)
    args = parser(line[0] if line else None).parse_args(line)
    signal.signal(signal.SIGTERM, _terminate)
    if getattr(args, "allow_exposed_triton", False):  # read where tritonserver starts, also in conch's subprocesses
        from conch.triton.network_namespace import ALLOW_EXPOSED_ENV

        os.environ[ALLOW_EXPOSED_ENV] = "1"
    try:
        with quiet_tensorflow(), startup_lines_filtered(), session(args):  # before anything imports TensorFlow
            return _run(args)
    finally:
        if argv is None:  # the program's own run, about to exit: the exit frees what is left without the
            gc.freeze()  # collector walking every object (the interpreter's last collections: ~0.07 s of a build)


def _run(args: argparse.Namespace) -> int:
    from conch.cli.extras import check_command
    from conch.cli.flags import use_python_flags
    from conch.errors import ConchError

    try:
        check_command(args)  # a missing optional package is one line before any work
        use_python_flags(args)  # --python, --strict: for every local server the command starts
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
        lost = _lost_connection(exc)
        if lost is not None:
            error(lost)
            return 2
        if os.environ.get("CONCH_TRACEBACK"):
            raise
        error(f"{type(exc).__name__}: {exc} (a conch bug, or a case it does not handle yet: run again with "
              "CONCH_TRACEBACK=1 and report the traceback)")
        return 2


def _lost_connection(exc: Exception) -> str | None:
    """A server that stopped answering mid-command (or never listened where a URL points): the address and what
    to check, in one line. httpx is looked up, not imported: only the commands that talk HTTP load it."""
    httpx = sys.modules.get("httpx")
    if httpx is None or not isinstance(exc, httpx.TransportError):
        return None
    try:
        where = f"{exc.request.method} {exc.request.url}"
    except RuntimeError:  # an error raised before any request was made
        where = "a server"
    return (f"the connection to {where} failed ({type(exc).__name__}: {exc or 'no answer'}): the server stopped or "
            "does not listen there; check the URL, or the server's log")
