"""Flags and argument types that several commands share: which ensembles (--release, --only), the load a
profile sends, the local MME's step names, sizes such as 6GiB, and the AWS account a command acts in."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any, Protocol

from conch.endpoint.step_names import StepNames
from conch.ensembles.target import DEFAULT_RELEASE

UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9,
         "t": 10**12, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


class Subcommands(Protocol):
    """What a command's ``register`` adds its parser to: ``add_subparsers()``'s ``add_parser``."""

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser: ...


class Arguments(Protocol):
    """A parser or one of its argument groups: what ``add_argument`` is called on."""

    def add_argument(self, *names: str, **kwargs: Any) -> argparse.Action: ...


def size(text: str) -> int:
    """Bytes from ``6GiB``, ``500MB``, ``1.5g`` or a plain number (argparse type)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    unit = match.group(2).lower() if match else ""
    if not match or unit not in UNITS:
        raise argparse.ArgumentTypeError(f"{text!r}: write a size such as 6GiB, 500MB or 2000000000")
    return int(float(match.group(1)) * UNITS[unit])


def add_ensemble_flags(sp: argparse.ArgumentParser) -> None:
    """``--release`` and ``--only``: the Triton release built for, and the ensembles chosen."""
    sp.add_argument("--release", default=DEFAULT_RELEASE, help=f"Triton release YY.MM (default {DEFAULT_RELEASE})")
    sp.add_argument("--only", action="append", help="only this ensemble (repeatable)")


def add_load_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--requests", type=int, default=50, help="requests measured, after a warm-up (default 50)")
    p.add_argument("--concurrency", type=int, default=1, help="requests in flight at once (default 1)")
    p.add_argument("--payload", type=Path, help="a KServe v2 JSON request to send instead of the samples")


def add_step_names(parser: Arguments) -> None:
    """``--step-names``, the same for serve and bench."""
    parser.add_argument("--step-names", choices=[n.value for n in StepNames], default=StepNames.SHARED.value,
                        help="shared (default): keep each archive's step model names, as SageMaker's image does; "
                        "TargetModels sharing names are counted and warned about as collisions. isolate: give a "
                        "TargetModel's step models names of their own when another uses theirs, which is what "
                        "`conch deploy` uploads (it stamps copies)")


def add_exposure_flag(parser: Arguments) -> None:
    """``--allow-exposed-triton``, the same for every command that starts a local tritonserver."""
    parser.add_argument("--allow-exposed-triton", action="store_true", help="where this machine refuses "
                        "tritonserver a network namespace of its own (no unprivileged user namespaces), run it with "
                        "its SageMaker port open on every interface without warning about it "
                        "(CONCH_ALLOW_EXPOSED_TRITON=1 does the same)")


def add_aws_flags(sp: argparse.ArgumentParser) -> None:
    """Which endpoint, and where: the same for deploy, invoke and undeploy."""
    sp.add_argument("--endpoint", required=True, help="SageMaker endpoint name")
    sp.add_argument("--region", help="AWS region (default: AWS_REGION or the profile's)")
    sp.add_argument("--endpoint-url", help="one URL for S3, SageMaker and autoscaling (S3/SageMaker-compatible "
                    "servers such as moto); default: AWS")


def add_python_flags(p: argparse.ArgumentParser) -> None:
    """``--python`` and ``--strict``: the interpreter the local server's Python-backend stubs run on, and
    whether another Python than the image's fails the run (commands that start a local tritonserver)."""
    p.add_argument("--python", action="append", type=Path, metavar="PATH",
                   help="an interpreter for the local Python-backend stubs, used for its version's releases "
                   "(repeatable; default: found in CONCH_PYTHON_3_10-style variables, pyenv, uv, conda, then "
                   "python3.X on PATH)")
    p.add_argument("--strict", dest="strict_python", action="store_true",
                   help="fail when no interpreter of the release's Python is found, instead of running the stubs "
                   "on conch's Python and saying so in every result (the default in CI: CI=true)")


def use_python_flags(args: argparse.Namespace) -> None:
    """Make ``--python`` and ``--strict`` hold for every server this process (and its children) starts."""
    import os

    from conch.image_python import given_interpreter
    from conch.triton.stub_python import STRICT_ENV

    for path in getattr(args, "python", None) or ():
        given_interpreter(path)
    if getattr(args, "strict_python", False):
        os.environ[STRICT_ENV] = "1"
