"""Every user-facing refusal conch can give, and whether a test reached it and asserted on its message.

A refusal is any message conch gives a user for a mistake, found in the source by reading it (never by
running it), listed one per place and kind:

- ``raise``: one of conch's errors (``ConchError`` and its subclasses) built with a message, wherever it
  is built (a helper may return one for its caller to raise);
- ``refusal``: a helper that builds the error for its callers (``refuse(entry, why)`` in the safe
  extraction): each call site is its own refusal, its words filled into the helper's message;
- ``finding``: a ``conch check`` finding (``report.error(file, message)`` / ``report.warning``);
- ``builtin``: Python's ``TypeError``/``KeyError``/``ValueError``/``FileNotFoundError`` raised for a
  misuse where the user meets it (the declaration API, the wire format, the local stand-ins' runners
  inside Triton) and ``argparse.ArgumentTypeError`` for a bad command-line value;
- ``model.py``: the raises of the generated Python model (``conch/templates/python_model.py.j2``),
  which run inside tritonserver.

A refusal counts as **asserted** only when a test saw its message and asserted on its fixed words:
``pytest.raises(..., match=)`` (or ``excinfo.match``) whose pattern matched the error, or a passing
``assert "words" in text`` / ``assert text == "..."`` where ``text`` holds the message (the CLI's
output, a report's lines, ``str(exc)``). The fixed words are the message's own text outside the
``{...}`` values: the asserted text must hold a run of at least ``MIN_WORDS`` characters of them (all of
them when the message has fewer), and the text it was found in must hold the whole message (its fixed
parts in order), so a test that only reaches the raise (a bare ``pytest.raises``) does not count. Lines
coverage.py saw run tell a reached-but-not-asserted raise from one no test reaches.

The evidence is recorded in each test process by ``tests/conftest.py`` (``pytest.raises``' match and
pytest's assertion-pass hook) and matched to the refusals there at the end of the run; pytest-xdist's workers
hand their matches to the controller (``workeroutput``), which merges them, writes ``.raise-evidence.json``
and reports after the run; the run fails when the asserted share of the refusals a test can reach is below ``FLOOR`` and
the whole default suite ran (``raise_floor`` in pyproject; the goal is ``FLOOR``). A raise that only passes on
a message built elsewhere (``raise X(str(exc))``) is listed as a relay and left out of the share: its text
is counted where it is built. On its own, after a run: ``python tests/error_raises.py [--all]``.
"""

from __future__ import annotations

import argparse
import ast
import fcntl
import hashlib
import itertools
import json
import os
import re
import sys
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "conch"
MODEL_TEMPLATE = PACKAGE / "templates" / "python_model.py.j2"
EVIDENCE_FILE = ROOT / ".raise-evidence.json"
ROOT_ERROR = "ConchError"
BUILTIN_MISUSE = {"TypeError", "KeyError", "ValueError", "FileNotFoundError", "ArgumentTypeError"}
# Where a builtin exception is a message to the user rather than an internal invariant.
BUILTIN_USER_FACING = ("conch/ensembles/", "conch/backends/standins/", "conch/wire.py", "conch/cli/")
SIMPLE_STATEMENTS = (ast.Raise, ast.Return, ast.Expr, ast.Assign, ast.AnnAssign, ast.AugAssign)
FINDING_METHODS = {"error", "warning"}
FINDING_RECEIVER = "report"
# The asserted share (in %) of the refusals a test can reach below which a full run fails.
FLOOR = 95.0
# How many characters of a message's fixed words an asserted text must hold (all of them if fewer).
MIN_WORDS = 12

# Raises no test here can trigger, by file and the start of their message, with the reason.
_INSTALLED = "the test environment installs every extra ('.[dev]'), and a missing one must fail the run"
WHY_NOT: dict[tuple[str, str], str] = {
    ("conch/triton_wheel.py", "the nvidia-pytriton wheel is not installed"):
        "nvidia-pytriton is a core dependency: every test environment has it",
    ("conch/triton_wheel.py", "no tritonserver binary in"): "needs a damaged nvidia-pytriton installation",
    ("conch/backends/dali.py", "dali step {step}: serializing or running a DALI pipeline needs DALI"): _INSTALLED,
    ("conch/backends/pytorch.py", "pytorch step {self.name}: reading {FILENAME} needs torch"): _INSTALLED,
    ("conch/backends/tensorflow.py", "tensorflow step {step}: reading a GraphDef needs TensorFlow"): _INSTALLED,
    ("conch/builder/pack.py", "packing a conda environment needs conda-pack"): _INSTALLED,
    ("conch/aws.py", "{doing}: no AWS region; pass --region"):
        "botocore's NoRegionError cannot happen: every client is made with AwsTarget's region",
    ("conch/compiler/compiled.py", "step {call.step.name} laid out model"):
        "an internal invariant against a backend bug; no backend lays out another model's name",
    ("conch/archive/extract.py", "archive {self.archive}: entry {member.name} ends after {len(found[name])} of"):
        "a guard against tarfile versions that return short data: Python 3.11's tarfile raises ReadError "
        "('unexpected end of data') first, which the readable-archive refusal beside it reports (tested)",
    ("conch/archive/extract.py", "archive {self.archive}: entry {member.name} ends after {written} of its"):
        "a guard against tarfile versions that return short data: Python 3.11's tarfile raises ReadError "
        "('unexpected end of data') first, which the readable-archive refusal beside it reports (tested)",
    ("conch/builder/repository_build.py", "model {model}: file {rel} leaves the archive"):
        "an internal invariant against a backend bug: the only '../' source, python_model's beside=, refuses "
        "absolute and '..' paths at declaration with its own tested DeclarationError",
    ("conch/importer/convert.py", "{path}: cannot be imported"):
        "the path is the .py file conch import has just written, for which importlib always finds a loader",
    ("conch/importer/convert.py", "{path}: declares no ensemble {name}"):
        "the module checked is the one conch import just wrote for that ensemble: only a conch bug gets here",
    ("conch/templates/python_model.py.j2", "{_where()}: request has no input"):
        "Triton refuses a request missing a required input before the model sees it ('expected 1 inputs but "
        "got 0'), and conch run never calls the model without its inputs",
    ("conch/builder/discover.py", "{path}: cannot be imported"):
        "importlib finds a loader for every .py path discover passes on",
    ("conch/executor.py", "cannot import {path}"):
        "both paths are .py files importlib always finds a loader for; a missing pb_utils needs a damaged "
        "nvidia-pytriton installation",
    ("conch/builder/parallel.py", "{job.source}: no ensemble named {job.ensemble} when imported again"):
        "workers are forked where fork exists (Linux, macOS) and inherit the imported ensemble files, so the "
        "re-import finds the same ensembles; only spawn platforms (Windows) execute the file again",
    ("conch/endpoint/disk.py", "TargetModel {target_model}: the archive is not a readable .tar.gz"):
        "safe_extract turns tarfile, EOF and zlib errors into an ArchiveError (passed on by the branch above); "
        "only an OSError while writing the unpacked files (a full disk) gets here",
    ("conch/endpoint/fleet.py", "{self.hop.unreachable(target_model, exc)}"):
        "reached only by a call made between tritonserver's exit and the watcher seeing it (the watcher waits on "
        "the process and restarts it at once); calls cut short by the exit are tested in test_mme_restart.py",
    ("conch/endpoint/app.py", "TargetModel {target}: Triton lost the model twice"):
        "needs Triton to forget a just-loaded model between its load and its invocation twice in a row (another "
        "client unloading it each time); no test can time that from outside",
    ("conch/perf/load/runner.py", "load generator: {event.get('message')}"):
        "triggered only by the slow tier (-m slow, tests/perf/load/test_load_errors.py): the generator's one "
        "error event comes after its master waited 60 s for workers that never connect",
    ("conch/perf/load/runner.py", "the load generator ran past {limit} s; stopped it"):
        "a safety net past the stages, the request timeout and 180 s of grace; Locust stops its users at the "
        "end of the last stage, so a generator only overruns when Locust itself hangs",
}

Parts = tuple[str | None, ...]  # a message as written: fixed text, None where a value goes


@dataclass(frozen=True)
class Raise:
    """One place that gives a user-facing message: where, what kind, which class, the message as written."""

    path: str
    line: int
    kind: str
    error: str
    parts: Parts = field(compare=False)
    message: str

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"

    @property
    def key(self) -> str:
        return f"{self.where} {self.message}"

    @property
    def fixed(self) -> list[str]:
        """The message's own words: literal parts holding a letter or digit (": " between values is none)."""
        return [p for p in self.parts if p is not None and any(c.isalnum() for c in p)]

    @property
    def relay(self) -> bool:
        """Passes on a message built elsewhere (``raise X(str(exc))``, ``f"{where}: {exc}"``): no words of its own
        to assert."""
        return not self.fixed

    def why_not(self) -> str | None:
        if self.relay:
            return "passes on a message built elsewhere, which is counted where it is built"
        for (path, start), why in WHY_NOT.items():
            if self.path == path and self.message.startswith(start):
                return why
        return None

    def held_by(self, text: str) -> bool:
        """Whether ``text`` holds the whole message: its fixed text in order, anything where a value goes. Each
        run of fixed text between two values is found at its first place after the one before, which is never the
        wrong one. The regex of the same (``.*?`` for each value) backtracked over long texts: one worker's
        matching took 44 s."""
        at = 0
        for value, parts in itertools.groupby(self.parts, lambda p: p is None):
            if value:
                continue
            run = "".join(str(p) for p in parts)
            found = text.find(run, at)
            if found < 0:
                return False
            at = found + len(run)
        return True


def _parts_text(parts: Parts, values: list[str]) -> str:
    it = iter(values)
    return "".join(p if p is not None else "{" + next(it, "...") + "}" for p in parts)


def _merge(parts: list[str | None]) -> Parts:
    out: list[str | None] = []
    for p in parts:
        if p is not None and out and out[-1] is not None:
            out[-1] = str(out[-1]) + p
        elif p == "":
            continue
        else:
            out.append(p)
    return tuple(out)


_PERCENT = re.compile(r"%[-#0 +]*\d*(?:\.\d+)?[sdrfi]")


def _segments(arg: ast.expr) -> tuple[Parts, list[str]]:
    """An expression building a message as fixed text and values (f-string, %-format, literal, or a value)."""
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return (arg.value,), []
    if isinstance(arg, ast.JoinedStr):
        parts: list[str | None] = []
        values = []
        for value in arg.values:
            if isinstance(value, ast.Constant):
                parts.append(str(value.value))
            elif isinstance(value, ast.FormattedValue):
                parts.append(None)
                values.append(ast.unparse(value.value))
        return _merge(parts), values
    if isinstance(arg, ast.BinOp) and isinstance(arg.op, ast.Mod) and isinstance(arg.left, ast.Constant):
        items = arg.right.elts if isinstance(arg.right, ast.Tuple) else [arg.right]
        text = str(arg.left.value).replace("%%", "\0")
        pieces: list[str | None] = []
        for i, piece in enumerate(_PERCENT.split(text)):
            if i:
                pieces.append(None)
            pieces.append(piece.replace("\0", "%"))
        return _merge(pieces), [ast.unparse(item) for item in items]
    if isinstance(arg, ast.BinOp) and isinstance(arg.op, ast.Add):
        left, lv = _segments(arg.left)
        right, rv = _segments(arg.right)
        return _merge([*left, *right]), lv + rv
    return (None,), [ast.unparse(arg)]


def _message(call: ast.Call, index: int = 0) -> tuple[Parts, list[str]]:
    if len(call.args) <= index:
        return (), []
    return _segments(call.args[index])


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


def _called_name(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _error_helpers(tree: ast.Module, errors: set[str]) -> dict[str, tuple[list[str], ast.Call, int]]:
    """Functions whose message takes words from their arguments (``refuse(entry, why)``): name -> params."""
    helpers = {}
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        params = [a.arg for a in fn.args.args if a.arg != "self"]
        for node in ast.walk(fn):
            if (isinstance(node, ast.Return) and isinstance(node.value, ast.Call)
                    and _called_name(node.value) in errors and node.value.args):
                names = {n.id for n in ast.walk(node.value.args[0]) if isinstance(n, ast.Name)}
                if names & set(params):
                    helpers[fn.name] = (params, node.value, node.lineno)
    return helpers


def _fill(helper: tuple[list[str], ast.Call, int], call: ast.Call) -> tuple[Parts, list[str]] | None:
    """The helper's message with the call's own words in place of its parameters, or None if it has none."""
    params, made, _ = helper
    args = dict(zip(params, call.args, strict=False))
    if not any(isinstance(a, ast.Constant | ast.JoinedStr) for a in args.values()):
        return None
    arg = made.args[0]
    if not isinstance(arg, ast.JoinedStr):
        return None
    parts: list[str | None] = []
    values: list[str] = []
    for value in arg.values:
        if isinstance(value, ast.Constant):
            parts.append(str(value.value))
            continue
        assert isinstance(value, ast.FormattedValue)
        inner = value.value
        given = args.get(inner.id) if isinstance(inner, ast.Name) else None
        if given is not None and value.conversion == -1:
            sub, sub_values = _segments(given)
            parts += sub
            values += sub_values
        else:
            parts.append(None)
            values.append(ast.unparse(given if given is not None else inner))
    return _merge(parts), values


def _raise(path: str, line: int, kind: str, error: str, parts: Parts, values: list[str]) -> Raise:
    return Raise(path, line, kind, error, parts, _parts_text(parts, values))


def _builtin_user_facing(path: str, name: str) -> bool:
    return name == "ArgumentTypeError" or path.startswith(BUILTIN_USER_FACING)


def find_raises(package: Path = PACKAGE, template: Path = MODEL_TEMPLATE) -> list[Raise]:
    """Every user-facing refusal in conch/ and the generated model.py, in file and line order."""
    modules = list(_modules(package))
    errors = error_classes(modules)
    found: list[Raise] = []
    for path, tree in modules:
        helpers = _error_helpers(tree, errors)
        filled: set[str] = set()
        for statement in ast.walk(tree):
            if not isinstance(statement, SIMPLE_STATEMENTS):
                continue
            for node in ast.walk(statement):
                if not isinstance(node, ast.Call):
                    continue
                name = str(_called_name(node))
                if name in helpers and (made := _fill(helpers[name], node)) is not None:
                    found.append(_raise(path, statement.lineno, "refusal", name, *made))
                    filled.add(name)
                elif name in errors:
                    found.append(_raise(path, statement.lineno, "raise", name, *_message(node)))
                elif (name in BUILTIN_MISUSE and isinstance(statement, ast.Raise) and statement.exc is node
                      and _builtin_user_facing(path, name)):
                    found.append(_raise(path, statement.lineno, "builtin", name, *_message(node)))
                elif (name in FINDING_METHODS and isinstance(node.func, ast.Attribute)
                      and isinstance(node.func.value, ast.Name) and node.func.value.id == FINDING_RECEIVER
                      and len(node.args) == 2):
                    found.append(_raise(path, statement.lineno, "finding", name, *_message(node, 1)))
        # a helper whose every call fills in its words is listed at its call sites, not once for all of them
        found = [r for r in found if not (r.path == path and r.line in {helpers[n][2] for n in filled})]
    found += model_raises(template, package.parent)
    return sorted(set(found), key=lambda r: (r.path, r.line))


def run_raises() -> list[Raise]:
    """``find_raises()`` once per test run: the first process to take the lock (the controller's ``read_ahead``
    thread, in a run on pytest-xdist workers) writes what it found into the run's cache folder
    (``$CONCH_CACHE_DIR``, shared by the workers and removed by the controller at the end), keyed by the bytes
    of conch/, the template and this file; the others wait for it and read it (reading conch/'s ~190 modules as
    Python takes a process ~3 s of CPU)."""
    sources = [*sorted(PACKAGE.rglob("*.py")), MODEL_TEMPLATE, Path(__file__)]
    digest = hashlib.sha256()
    for path in sources:
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    folder = os.environ.get("CONCH_CACHE_DIR")
    if not folder:
        return find_raises()
    stored = Path(folder) / "test-raises" / f"{digest.hexdigest()}.json"
    stored.parent.mkdir(parents=True, exist_ok=True)
    with (stored.parent / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one process reads conch/, the others wait for what it found
        if stored.is_file():
            return [Raise(path, line, kind, error, tuple(parts), message)
                    for path, line, kind, error, parts, message in json.loads(stored.read_text())]
        raises = find_raises()
        tmp = stored.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps([[r.path, r.line, r.kind, r.error, list(r.parts), r.message] for r in raises]))
        tmp.replace(stored)
    return raises


def read_ahead(config: Any) -> None:
    """pytest-xdist's controller, at the start of a run with coverage: read conch/'s refusals in a thread while
    the workers run the tests (the controller only waits for their reports), so that no worker reads them at the
    end of the run, where each second is the run's."""
    if hasattr(config, "workerinput") or not config.getoption("numprocesses", None):
        return
    if _session_data(config, combined=False) is None:
        return
    threading.Thread(target=run_raises, name="read-refusals", daemon=True).start()


def model_raises(template: Path = MODEL_TEMPLATE, root: Path = ROOT) -> list[Raise]:
    """The raises of the generated model.py: its template read as Python, Jinja's holes filled with a name."""
    source = re.sub(r"\{\{.*?\}\}", "_jinja", template.read_text())
    tree = ast.parse(source)
    path = template.relative_to(root).as_posix()
    strings = {fn.name: [r.value for r in ast.walk(fn) if isinstance(r, ast.Return) and r.value is not None]
               for fn in ast.walk(tree) if isinstance(fn, ast.FunctionDef)}
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args):
            continue
        name = str(_called_name(node.exc))
        arg = node.exc.args[0]
        helper = _called_name(arg) if isinstance(arg, ast.Call) else None
        for made in strings.get(helper or "", [arg]):
            found.append(_raise(path, made.lineno if helper else node.lineno, "model.py", name, *_segments(made)))
    return found


# ---- evidence: what the tests asserted, recorded in the test process ------------------------------------


@dataclass
class Evidence:
    """Asserted texts, each with the text it was asserted against and the test that asserted it."""

    seen: dict[tuple[str, str, bool], str] = field(default_factory=dict)
    test: str = ""

    def asserted(self, needle: str, haystack: str, regex: bool) -> None:
        key = (needle, haystack, regex)
        if needle and haystack and key not in self.seen:
            self.seen[key] = self.test

    def compared(self, op: str, left: object, right: object) -> None:
        """A passing ``in``/``==`` between texts (pytest's assertion-pass hook hands it over)."""
        if not (isinstance(left, str) and isinstance(right, str)):
            return
        if op in ("in", "=="):
            self.asserted(left, right, False)


EVIDENCE = Evidence()


def _literal_runs(needle: str, regex: bool) -> list[str]:
    """The literal text an asserted needle insists on: all of it, or a regex's runs of plain characters."""
    if not regex:
        return [needle]
    try:
        import re._parser as sre_parse  # type: ignore[import-not-found]
    except ImportError:  # Python 3.10
        import sre_parse  # type: ignore[no-redef]
    try:
        parsed = sre_parse.parse(needle)
    except re.error:
        return []
    runs, current = [], []
    for op, value in parsed:
        if op == sre_parse.LITERAL:
            current.append(chr(value))
        else:
            runs.append("".join(current))
            current = []
    runs.append("".join(current))
    return [r for r in runs if r]


def _need(raise_: Raise) -> int:
    """How many characters of the message's fixed text an asserted run must hold: ``MIN_WORDS``, or all of its
    longest fixed part when that is shorter."""
    return min(MIN_WORDS, max(len(p.strip()) for p in raise_.fixed))


class _Windows:
    """A literal run holds a refusal's fixed words when it and one of the fixed parts hold a common text of
    ``_need`` characters (the run may reach past one fixed part into a value). Every such window of each
    refusal's fixed parts, looked up by its text: the refusals a run holds are those some window of the run
    names, found in one pass over the run (a search of the run per window of each of the ~600 refusals took
    6 s for 550 asserted texts, this 0.45 s)."""

    def __init__(self, raises: list[Raise]) -> None:
        self.by_need: dict[int, dict[str, list[int]]] = {}
        for n, r in enumerate(raises):
            if not r.fixed:
                continue
            need = _need(r)
            windows = self.by_need.setdefault(need, {})
            for part in r.fixed:
                for i in range(len(part) - need + 1):
                    found = windows.setdefault(part[i:i + need], [])
                    if not found or found[-1] != n:
                        found.append(n)

    def holding(self, runs: list[str]) -> set[int]:
        """The indices of the refusals whose fixed words one of ``runs`` holds."""
        hit: set[int] = set()
        for need, windows in self.by_need.items():
            for run in runs:
                for i in range(len(run) - need + 1):
                    hit.update(windows.get(run[i:i + need], ()))
        return hit


def asserted_raises(raises: list[Raise], seen: Iterable[tuple[str, str, bool, str]]) -> dict[str, str]:
    """Each refusal's key -> the first test that asserted it."""
    done: dict[str, str] = {}
    windows = _Windows(raises)
    for needle, haystack, regex, test in seen:
        runs = _literal_runs(needle, regex)
        if not runs:
            continue
        for n in sorted(windows.holding(runs)):
            r = raises[n]
            if r.key in done:
                continue
            if r.held_by(haystack):
                done[r.key] = test
    return done


def matched(evidence: Evidence) -> dict[str, str]:
    """This process's asserted texts matched to the refusals: refusal key -> the test that asserted it."""
    if not evidence.seen:  # pytest-xdist's controller runs no test: no need to read conch/ for nothing
        return {}
    return asserted_raises(run_raises(), ((n, h, rx, t) for (n, h, rx), t in evidence.seen.items()))


def merge(into: dict[str, str], more: dict[str, str]) -> dict[str, str]:
    """Two processes' matches as one: a refusal asserted in either, by the first test in node-id order."""
    for key, test in more.items():
        if key not in into or test < into[key]:
            into[key] = test
    return into


def save_evidence(asserted: dict[str, str], path: Path = EVIDENCE_FILE) -> dict[str, str]:
    """Write the run's matches (atomically) for the CLI."""
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(asserted, indent=0, sort_keys=True))
    tmp.replace(path)
    return asserted


# ---- the report ----------------------------------------------------------------------------------------


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
    asserted: dict[str, str]
    reached: set[str]
    floor: float = FLOOR

    @property
    def counted(self) -> list[Raise]:
        """The refusals a test can reach: those without a written reason why none can."""
        return [r for r in self.raises if r.why_not() is None or r.key in self.asserted]

    @property
    def percent(self) -> float:
        counted = self.counted
        hit = sum(r.key in self.asserted for r in counted)
        return 100.0 * hit / len(counted) if counted else 100.0

    def lines(self, show_all: bool = False) -> list[str]:
        kinds = sorted({r.kind for r in self.raises})
        per_kind = ", ".join(
            f"{k} {sum(r.key in self.asserted for r in self.raises if r.kind == k)}/"
            f"{sum(r.kind == k for r in self.raises)}" for k in kinds)
        total = len(self.raises)
        asserted = sum(r.key in self.asserted for r in self.raises)
        out = [f"user-facing refusals in conch/: {total}; reached and asserted on by message in a test: {asserted} "
               f"({per_kind}); {total - len(self.counted)} left out (RELAY: passes on a message built elsewhere; "
               "SKIP: no test can reach it, reason given)",
               f"asserted share of the {len(self.counted)} a test can reach: {self.percent:.1f} % "
               f"(floor {self.floor:.1f} %, goal {FLOOR:.0f} %)"]
        if show_all:
            out += [f"  ok   {r.where}  {r.kind} {r.error}: {r.message}  <- {self.asserted[r.key]}"
                    for r in self.raises if r.key in self.asserted]
        for r in self.raises:
            if r.key in self.asserted:
                continue
            why = r.why_not()
            if r.relay:
                out.append(f"  RELAY {r.where}  {r.kind} {r.error}: {r.message}")
            elif why is not None:
                out.append(f"  SKIP {r.where}  {r.kind} {r.error}: {r.message}  -- {why}")
            elif r.key in self.reached:
                out.append(f"  NOT ASSERTED {r.where}  {r.kind} {r.error}: {r.message}  -- a test reaches it but "
                           "asserts none of its fixed words")
            else:
                out.append(f"  UNTESTED {r.where}  {r.kind} {r.error}: {r.message}")
        return out


def report(data: Any, asserted: dict[str, str], package: Path = PACKAGE) -> RaiseReport:
    raises = run_raises() if package == PACKAGE else find_raises(package)
    lines = executed_lines(data) if data is not None else {}
    return RaiseReport(raises, asserted, {r.key for r in raises if r.line in lines.get(r.path, set())})


def _result_key() -> Any:
    import pytest

    return pytest.StashKey[RaiseReport | None]()


_RESULT = _result_key()


def _session_data(config: Any, combined: bool = True) -> Any:
    """The coverage data of this pytest run (pytest-cov's, combined across processes), or None when coverage
    is off; with ``combined=False`` only whether it is on (a worker's data goes to the controller)."""
    plugin = config.pluginmanager.getplugin("_cov")
    controller = getattr(plugin, "cov_controller", None)
    cov = getattr(controller, "cov", None)
    if cov is None or not combined:
        return cov
    return cov.get_data()


def whole_suite(config: Any) -> bool:
    """Whether this run is the default suite: its testpaths, no -k, no deselection, no --lf."""
    from _pytest.config import Config

    return (config.args_source == Config.ArgsSource.TESTPATHS and not config.option.keyword
            and not config.getoption("deselect", None) and not config.getoption("lf", False))


# pytest-xdist: what each worker's tests asserted, under this key of its ``workeroutput``.
WORKER_KEY = "conch_asserted_refusals"


def _workers_key() -> Any:
    import pytest

    return pytest.StashKey[dict[str, str]]()


_WORKERS = _workers_key()


def worker_done(config: Any, workeroutput: dict[str, Any]) -> None:
    """pytest-xdist's controller, as each worker ends: add the refusals its tests asserted to the run's."""
    merge(config.stash.setdefault(_WORKERS, {}), dict(workeroutput.get(WORKER_KEY, {})))


def session_finish(session: Any) -> None:
    """Match this run's evidence, and fail a whole-suite run whose asserted share is below the floor. Under
    pytest-xdist each worker matches its own tests' evidence and hands it to the controller (``workeroutput``,
    received in ``worker_done``), which merges it and applies the gate, with coverage combined across workers."""
    config = session.config
    workeroutput = getattr(config, "workeroutput", None)
    if workeroutput is not None:  # a worker: the controller reports
        workeroutput[WORKER_KEY] = matched(EVIDENCE) if _session_data(config, combined=False) is not None else {}
        return
    data = _session_data(config)
    if data is None:
        config.stash[_RESULT] = None
        return
    result = report(data, save_evidence(merge(matched(EVIDENCE), config.stash.get(_WORKERS, {}))))
    result.floor = floor(config)
    config.stash[_RESULT] = result
    if whole_suite(config) and result.percent < result.floor and session.exitstatus == 0:
        session.exitstatus = 1


def terminal_summary(terminalreporter: Any, config: Any) -> None:
    terminalreporter.section("user-facing refusals")
    result = config.stash.get(_RESULT, None)
    if result is None:
        terminalreporter.write_line("not measured: this run has no coverage (pytest-cov off)")
        return
    for line in result.lines(show_all=config.get_verbosity() > 1):
        terminalreporter.write_line(line)
    if whole_suite(config) and result.percent < result.floor:
        terminalreporter.write_line(f"FAIL: the asserted share {result.percent:.1f} % is below the floor of "
                                    f"{result.floor:.1f} %: assert the UNTESTED / NOT ASSERTED messages above",
                                    red=True)


def floor(config: Any) -> float:
    """The floor pyproject sets (``raise_floor`` under [tool.pytest.ini_options]), else ``FLOOR``."""
    try:
        value = config.getini("raise_floor")
    except ValueError:
        return FLOOR
    return float(value) if value else FLOOR


def main(argv: list[str] | None = None) -> int:
    import coverage

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data_file", nargs="?", default=str(ROOT / ".coverage"))
    parser.add_argument("--all", action="store_true", help="list the asserted refusals too, with the test")
    parser.add_argument("--evidence", default=str(EVIDENCE_FILE), help="the matches the last pytest run wrote")
    args = parser.parse_args(argv)
    data = coverage.CoverageData(basename=args.data_file)
    data.read()
    evidence = Path(args.evidence)
    asserted = json.loads(evidence.read_text()) if evidence.is_file() else {}
    result = report(data, asserted)
    result.floor = _pyproject_floor()
    print("\n".join(result.lines(show_all=args.all)))
    return 0 if result.percent >= result.floor else 1


def _pyproject_floor() -> float:
    import tomllib

    options = tomllib.loads((ROOT / "pyproject.toml").read_text()).get("tool", {}).get("pytest", {})
    value = options.get("ini_options", {}).get("raise_floor")
    return float(value) if value else FLOOR


if __name__ == "__main__":
    sys.exit(main())
