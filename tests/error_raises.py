"""Every user-facing error raise in conch/ and whether a test triggers it.

A raise is user-facing when it builds one of conch's errors (``ConchError`` and its subclasses, wherever
it is built: a helper may return one for its caller to raise), or when the declaration API raises
Python's own ``TypeError``/``KeyError``/``ValueError`` for a misuse. Each is listed by its message (the
f-string as written, ``{...}`` where values go). It counts as triggered when coverage.py saw its
statement run during the test session, in the test process or in a subprocess (the CLI tests), which
is why the report needs the coverage run that ``pytest`` starts (``--cov`` in pyproject's addopts).

Printed at the end of every ``pytest`` run by ``tests/conftest.py``; on its own, after a run:
``python tests/error_raises.py [path/to/.coverage]`` (``--all`` lists the triggered ones too).
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "conch"
ROOT_ERROR = "ConchError"
BUILTIN_MISUSE = {"TypeError", "KeyError", "ValueError"}
DECLARATION_API = "conch/ensembles/"
SIMPLE_STATEMENTS = (ast.Raise, ast.Return, ast.Expr, ast.Assign, ast.AnnAssign, ast.AugAssign)

# Raises no test here can trigger, by file and the start of their message, with the reason.
_INSTALLED = "the test environment installs every extra ('.[dev]'), and a missing one must fail the run"
WHY_NOT: dict[tuple[str, str], str] = {
    ("conch/harness/server.py", "the nvidia-pytriton wheel is not installed"):
        "nvidia-pytriton is a core dependency: every test environment has it",
    ("conch/harness/server.py", "no tritonserver binary in"): "needs a damaged nvidia-pytriton installation",
    ("conch/backends/dali.py", "dali step {step}: serializing or running a DALI pipeline needs DALI"): _INSTALLED,
    ("conch/backends/pytorch.py", "pytorch step {self.name}: reading {FILENAME} needs torch"): _INSTALLED,
    ("conch/backends/tensorflow.py", "tensorflow step {step}: reading a GraphDef needs TensorFlow"): _INSTALLED,
    ("conch/builder/pack.py", "packing a conda environment needs conda-pack"): _INSTALLED,
    ("conch/sagemaker/aws.py", "{doing}: no AWS region; pass --region"):
        "botocore's NoRegionError cannot happen: every client is made with AwsTarget's region",
    ("conch/builder/build.py", "step {step.name} laid out model"):
        "an internal invariant against a backend bug; no backend lays out another model's name",
    ("conch/builder/discover.py", "{path}: cannot be imported"):
        "importlib finds a loader for every .py path discover passes on",
    ("conch/run.py", "cannot import {path}"):
        "both paths are .py files importlib always finds a loader for; a missing pb_utils needs a damaged "
        "nvidia-pytriton installation",
    ("conch/builder/parallel.py", "{job.source}: no ensemble named {job.ensemble} when imported again"):
        "workers are forked where fork exists (Linux, macOS) and inherit the imported ensemble files, so the "
        "re-import finds the same ensembles; only spawn platforms (Windows) execute the file again",
    ("conch/harness/endpoint/disk.py", "TargetModel {target_model}: the archive is not a readable .tar.gz"):
        "safe_extract turns tarfile, EOF and zlib errors into an ArchiveError (passed on by the branch above); "
        "only an OSError while writing the unpacked files (a full disk) gets here",
    ("conch/harness/endpoint/fleet.py", "{self.hop.unreachable(target_model, exc)}"):
        "reached only by a call made between tritonserver's exit and the watcher seeing it (the watcher waits on "
        "the process and restarts it at once); calls cut short by the exit are tested in test_mme_restart.py",
    ("conch/harness/endpoint/app.py", "TargetModel {target}: Triton lost the model twice"):
        "needs Triton to forget a just-loaded model between its load and its invocation twice in a row (another "
        "client unloading it each time); no test can time that from outside",
    ("conch/harness/load/runner.py", "load generator: {event.get('message')}"):
        "triggered only by the slow tier (-m slow, tests/harness/load/test_load_errors.py): the generator's one "
        "error event comes after its master waited 60 s for workers that never connect",
    ("conch/harness/load/runner.py", "the load generator ran past {limit} s; stopped it"):
        "a safety net past the stages, the request timeout and 180 s of grace; Locust stops its users at the "
        "end of the last stage, so a generator only overruns when Locust itself hangs",
    ("conch/plan/validate.py", "the MME counted {hits + misses} invocations for a trace of {len(trace)}"):
        "a consistency check of conch's own metrics: each invocation the replay sends is counted once; only "
        "another client calling the same MME during the comparison makes the counts differ",
}


@dataclass(frozen=True)
class Raise:
    """One place that builds a user-facing error: where, which class, and its message as written."""

    path: str
    line: int
    error: str
    message: str

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"

    def why_not(self) -> str:
        for (path, start), why in WHY_NOT.items():
            if self.path == path and self.message.startswith(start):
                return why
        return "no test triggers it yet"


def _modules(package: Path) -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(package.rglob("*.py")):
        yield path.relative_to(package.parent).as_posix(), ast.parse(path.read_text(), filename=str(path))


def _base_names(cls: ast.ClassDef) -> set[str]:
    return {b.id if isinstance(b, ast.Name) else b.attr for b in cls.bases if isinstance(b, ast.Name | ast.Attribute)}


def error_classes(modules: Iterable[tuple[str, ast.Module]]) -> set[str]:
    """ConchError and every class in conch/ that derives from it, however deep."""
    classes = [node for _, tree in modules for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]
    found = {ROOT_ERROR}
    grew = True
    while grew:
        grew = False
        for cls in classes:
            if cls.name not in found and _base_names(cls) & found:
                found.add(cls.name)
                grew = True
    return found


def message_of(call: ast.Call) -> str:
    """The error's message as written: literal text, ``{expression}`` where an f-string puts a value."""
    if not call.args:
        return ""
    arg = call.args[0]
    if isinstance(arg, ast.Constant):
        return str(arg.value)
    if isinstance(arg, ast.JoinedStr):
        parts = []
        for value in arg.values:
            if isinstance(value, ast.Constant):
                parts.append(str(value.value))
            elif isinstance(value, ast.FormattedValue):
                parts.append("{" + ast.unparse(value.value) + "}")
        return "".join(parts)
    return "{" + ast.unparse(arg) + "}"


def _called_name(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def find_raises(package: Path = PACKAGE) -> list[Raise]:
    """Every user-facing error conch/ builds, in file and line order."""
    modules = list(_modules(package))
    errors = error_classes(modules)
    found = []
    for path, tree in modules:
        for statement in ast.walk(tree):
            if not isinstance(statement, SIMPLE_STATEMENTS):
                continue
            for node in ast.walk(statement):
                if not isinstance(node, ast.Call):
                    continue
                name = _called_name(node)
                builtin = (name in BUILTIN_MISUSE and path.startswith(DECLARATION_API)
                           and isinstance(statement, ast.Raise) and statement.exc is node)
                if name in errors or builtin:
                    found.append(Raise(path, statement.lineno, str(name), message_of(node)))
    return sorted(set(found), key=lambda r: (r.path, r.line))


def executed_lines(data: Any) -> dict[str, set[int]]:
    """Lines coverage.py saw run, per path relative to the repository root."""
    lines: dict[str, set[int]] = {}
    for filename in data.measured_files():
        path = Path(filename).resolve()
        if path.is_relative_to(ROOT):
            lines[path.relative_to(ROOT).as_posix()] = set(data.lines(filename) or ())
    return lines


@dataclass
class RaiseReport:
    raises: list[Raise]
    triggered: list[Raise]

    @property
    def untriggered(self) -> list[Raise]:
        done = set(self.triggered)
        return [r for r in self.raises if r not in done]

    @property
    def percent(self) -> float:
        return 100.0 * len(self.triggered) / len(self.raises) if self.raises else 100.0

    def lines(self, show_all: bool = False) -> list[str]:
        out = [f"user-facing error raises in conch/: {len(self.raises)}, triggered by a test: "
               f"{len(self.triggered)} ({self.percent:.1f} %), not triggered: {len(self.untriggered)}"]
        if show_all:
            out += [f"  ok   {r.where}  {r.error}: {r.message}" for r in self.triggered]
        out += [f"  MISS {r.where}  {r.error}: {r.message}  -- {r.why_not()}" for r in self.untriggered]
        return out


def report(data: Any, package: Path = PACKAGE) -> RaiseReport:
    raises = find_raises(package)
    lines = executed_lines(data)
    return RaiseReport(raises, [r for r in raises if r.line in lines.get(r.path, set())])


def _session_data(config: Any) -> Any:
    """The coverage data of this pytest run (pytest-cov's, combined across processes), or None."""
    plugin = config.pluginmanager.getplugin("_cov")
    controller = getattr(plugin, "cov_controller", None)
    cov = getattr(controller, "cov", None)
    return None if cov is None else cov.get_data()


def terminal_summary(terminalreporter: Any, config: Any) -> None:
    data = _session_data(config)
    terminalreporter.section("user-facing error raises")
    if data is None:
        terminalreporter.write_line("not measured: this run has no coverage (pytest-cov off)")
        return
    for line in report(data).lines(show_all=config.get_verbosity() > 1):
        terminalreporter.write_line(line)


def main(argv: list[str] | None = None) -> int:
    import coverage

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data_file", nargs="?", default=str(ROOT / ".coverage"))
    parser.add_argument("--all", action="store_true", help="list the triggered raises too")
    args = parser.parse_args(argv)
    data = coverage.CoverageData(basename=args.data_file)
    data.read()
    print("\n".join(report(data).lines(show_all=args.all)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
