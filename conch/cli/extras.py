"""Optional packages, checked before a command does any work: a missing one is one error line naming the
extra that installs it, not a traceback halfway through a build or a load test.

A command that needs a package whatever it is given lists it in ``COMMAND_NEEDS`` (a new command: one line);
what the ensembles or archives a command is given need is read from their steps' kinds."""

from __future__ import annotations

import argparse
import importlib.util
from collections.abc import Iterable
from pathlib import Path

from conch.errors import ArchiveError, ConchError, DependencyError

# importable module -> the extra of pyproject.toml that installs it
EXTRA_OF = {
    "locust": "bench",
    "matplotlib": "bench",
    "pygraphviz": "graph",
    "conda_pack": "conda",
    "nvidia.dali": "dali",
    "tensorflow": "tensorflow",
    "torch": "pytorch",
    "onnx": "onnx",
    "onnxruntime": "onnx",
    "transformers": "examples",
    "tokenizers": "examples",
}

# command -> modules it needs whatever it is given
COMMAND_NEEDS = {"bench": ("locust", "matplotlib"), "plan": ("matplotlib",), "tune": ("matplotlib",)}
# (`conch graph --format svg` without pygraphviz writes the dot text instead, with one warning naming the extra)

# step kind -> modules that build it, or run it here (in-process or as the local server's stand-in)
KIND_NEEDS = {
    "dali": ("nvidia.dali",),
    "tensorflow": ("tensorflow",),
    "pytorch": ("torch",),
    "onnx": ("onnx", "onnxruntime"),
    "tensorrt": ("onnxruntime",),
}
# commands that build or run the ensembles of the .py files they are given, and those that serve archives
RUN_SOURCES = ("build", "run", "replay", "serve")
IMPORT_SOURCES = (*RUN_SOURCES, "graph")  # commands that import the ensemble files they are given
SERVE_ARCHIVES = ("replay", "serve", "bench")


def installed(module: str) -> bool:
    """Whether ``module`` can be imported, without importing it (a module set to None counts as missing)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a module hidden as None
        return False


def missing_message(module: str, why: str) -> str:
    extra = EXTRA_OF.get(module)
    fix = f"pip install 'conch[{extra}]'" if extra else f"pip install {module.split('.')[0]}"
    return f"{why} needs {module}, which is not installed: {fix}"


def require(modules: Iterable[str], why: str) -> None:
    """DependencyError for the first of ``modules`` that is not installed."""
    for module in modules:
        if not installed(module):
            raise DependencyError(missing_message(module, why))


def check_command(args: argparse.Namespace) -> None:
    """Everything the command about to run needs, checked before it starts (DependencyError otherwise)."""
    command = str(getattr(args, "command", ""))
    require(COMMAND_NEEDS.get(command, ()), f"conch {command}")
    paths = [Path(p) for p in (getattr(args, "paths", None) or getattr(args, "archives", None) or [])]
    if not paths or command not in (*IMPORT_SOURCES, *SERVE_ARCHIVES):
        return
    from conch.builder.discover import sort_paths

    try:
        given = sort_paths(paths)
    except ConchError:
        return  # the command says what is wrong with its paths
    if command in SERVE_ARCHIVES:
        _check_archives(given.archives, command)
    if command in IMPORT_SOURCES and given.sources:
        _check_sources(given.sources, command, build=command == "build", run=command in RUN_SOURCES)


def _check_archives(archives: Iterable[Path], command: str) -> None:
    from conch.archive.manifest import read_manifest

    for archive in archives:
        try:
            steps = read_manifest(archive).steps
        except (ArchiveError, OSError):
            continue  # whoever loads it says why
        for step in steps:
            kind = str(step.described.get("kind", ""))
            if step.served_as == "python" and kind in KIND_NEEDS:  # a local stand-in runs it here
                require(KIND_NEEDS[kind][-1:], f"conch {command} {archive.name} (its {kind} step {step.model_name!r})")


def _check_sources(sources: Iterable[Path], command: str, *, build: bool, run: bool) -> None:
    """Import the ensemble files (they stay imported, so the command does not import them again) and check
    what their steps need; a file that fails to import for another reason is left to the command to report."""
    from conch.builder.discover import discover

    def unless_missing(exc: ConchError) -> None:
        cause = exc.__cause__
        if isinstance(cause, ModuleNotFoundError) and cause.name:
            for module in EXTRA_OF:
                if cause.name == module or cause.name.startswith(module + "."):
                    raise DependencyError(missing_message(module, str(exc).split(":", 1)[0])) from cause

    try:
        ensembles = discover(sources, on_error=unless_missing)
    except DependencyError:
        raise
    except ConchError:
        return  # e.g. one ensemble name in two files: the command says so
    for ensemble in ensembles if run else ():
        for call in ensemble.calls:
            step = call.step
            kind = str(getattr(step, "kind", ""))
            why = f"conch {command}: ensemble {ensemble.name!r} step {step.name!r} ({kind})"
            require(KIND_NEEDS.get(kind, ()), why)
            env = ensemble.env_of(step)
            if build and env is not None and getattr(env, "conda_prefix", None) is not None:
                require(("conda_pack",), why)
