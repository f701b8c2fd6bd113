"""The chosen settings written back into the declaration the user keeps: each tuned step's constructor call
(``OnnxStep("encoder", ...)``, ``PythonStep("tokenize", ...)``), found with ``ast`` in the ensemble file or a
module beside it that the file imports, gets its ``instance_group=``, ``dynamic_batching=`` and thread
``parameters=`` rewritten; the result is a unified diff, and optionally the files themselves."""

from __future__ import annotations

import ast
import difflib
import itertools
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from conch.perf.tune.space import Knobs, StepSpace


@dataclass(frozen=True)
class Patch:
    """The rewritten files (path -> new text), their unified diff, and the steps no call was found for."""

    files: Mapping[Path, str]
    diff: str
    missing: tuple[str, ...]

    def write(self) -> list[Path]:
        """Write every rewritten file atomically (a temporary file renamed into place)."""
        from conch.atomic_write import write_bytes_atomic

        for path, text in self.files.items():
            # the user's file keeps its own mode (0600, 0755...), never readable by others in between
            write_bytes_atomic(path, text.encode("utf-8"), stat.S_IMODE(path.stat().st_mode))
        return list(self.files)


@dataclass(frozen=True)
class _Edit:
    start: int  # byte offsets into the file
    end: int
    text: str


def _candidates(source: Path) -> list[Path]:
    """The ensemble file, then the modules beside it that it imports (steps are often declared in a helper)."""
    found = [source]
    tree = ast.parse(source.read_text(encoding="utf-8"))
    for node in tree.body:
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
            [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else [])
        for name in names:
            beside = source.parent / f"{name.split('.')[0]}.py"
            if beside.is_file() and beside not in found:
                found.append(beside)
    return found


def _step_name(call: ast.Call) -> str | None:
    """The step name of a step constructor call (``SomethingStep("name", ...)``), else None."""
    func = call.func.id if isinstance(call.func, ast.Name) else (
        call.func.attr if isinstance(call.func, ast.Attribute) else "")
    if not func.endswith("Step"):
        return None
    first = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "name"), None)
    return first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else None


def _offsets(text: str) -> list[int]:
    """The byte offset at which each line starts (ast's col_offset counts bytes), and the end."""
    return [0, *itertools.accumulate(len(line) for line in text.encode("utf-8").splitlines(keepends=True))]


def _bound_names(tree: ast.Module) -> set[str]:
    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom | ast.Import):
            found.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Assign):
            found.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return found


def _instance_group(call: ast.Call, raw: bytes, starts: list[int], knobs: Knobs) -> str | None:
    """The ``InstanceGroup(...)`` text for the new count, keeping a declared kind (KIND_GPU stays KIND_GPU)."""
    old = next((k.value for k in call.keywords if k.arg == "instance_group"), None)
    if old is None:
        return None if knobs.instances == 1 else f"InstanceGroup(count={knobs.instances})"
    if isinstance(old, ast.Call) and not [k for k in old.keywords if k.arg not in ("kind", "count")]:
        kind = old.args[0] if old.args else next((k.value for k in old.keywords if k.arg == "kind"), None)
        if kind is not None:
            kind_text = _segment(raw, starts, kind)
            return f"InstanceGroup({kind_text}, count={knobs.instances})"
    return f"InstanceGroup(count={knobs.instances})"


def _segment(raw: bytes, starts: list[int], node: ast.expr) -> str:
    begin, end = _span(starts, node)
    return raw[begin:end].decode("utf-8")


def _span(starts: list[int], node: ast.AST) -> tuple[int, int]:
    end_line, end_col = getattr(node, "end_lineno", None), getattr(node, "end_col_offset", None)
    assert end_line is not None and end_col is not None
    return starts[node.lineno - 1] + node.col_offset, starts[end_line - 1] + end_col  # type: ignore[attr-defined]


def _batching(knobs: Knobs) -> str:
    if not knobs.batching:
        return "None"
    sizes = f"preferred_batch_size={tuple(knobs.preferred)!r}, " if knobs.preferred else ""
    return f"DynamicBatching({sizes}max_queue_delay_microseconds={knobs.delay_us})"


def _parameters(call: ast.Call, raw: bytes, starts: list[int], step: StepSpace, knobs: Knobs) -> str | None:
    old = next((k.value for k in call.keywords if k.arg == "parameters"), None)
    wanted = {key: knobs.thread(key) for key in step.thread_keys}
    if old is None:
        kept = {k: v for k, v in wanted.items() if v is not None}
        return None if not kept else "{" + ", ".join(f'"{k}": "{v}"' for k, v in kept.items()) + "}"
    if isinstance(old, ast.Dict) and all(isinstance(k, ast.Constant) for k in old.keys):
        entries, present = [], set()
        for k, v in zip(old.keys, old.values, strict=True):  # in the declared order, values replaced in place
            assert isinstance(k, ast.Constant)
            present.add(k.value)
            if k.value not in wanted:
                entries.append(f"{_segment(raw, starts, k)}: {_segment(raw, starts, v)}")
            elif wanted[k.value] is not None:
                entries.append(f'{_segment(raw, starts, k)}: "{wanted[k.value]}"')
        entries += [f'"{k}": "{v}"' for k, v in wanted.items() if v is not None and k not in present]
        return "{" + ", ".join(entries) + "}"
    extra = ", ".join(f'"{k}": "{v}"' for k, v in wanted.items() if v is not None)
    return "{**" + _segment(raw, starts, old) + (", " + extra if extra else "") + "}"


def _call_edits(call: ast.Call, raw: bytes, starts: list[int], step: StepSpace, knobs: Knobs) -> list[_Edit]:
    values = {"instance_group": _instance_group(call, raw, starts, knobs),
              "dynamic_batching": _batching(knobs) if step.batches else None,
              "parameters": _parameters(call, raw, starts, step, knobs)}
    edits, added = [], []
    for name, text in values.items():
        old = next((k for k in call.keywords if k.arg == name), None)
        if old is not None and text is not None:
            begin, end = _span(starts, old.value)
            if raw[begin:end].decode("utf-8") != text:
                edits.append(_Edit(begin, end, text))
        elif old is None and text is not None and text != "None":
            added.append(f"{name}={text}")
    if added:
        edits.append(_insertion(call, raw, starts, added))
    return edits


def _insertion(call: ast.Call, raw: bytes, starts: list[int], added: list[str]) -> _Edit:
    """New keyword arguments before the call's closing parenthesis, in the call's own layout."""
    _, end = _span(starts, call)
    close = end - 1  # the ')'
    args: list[ast.AST] = [*call.args, *call.keywords]
    last_end = _span(starts, args[-1])[1] if args else close
    between = raw[last_end:close].decode("utf-8")
    line_start = raw.rfind(b"\n", 0, close) + 1
    if args and raw[line_start:close].strip() == b"":  # the ')' on a line of its own: one argument per line
        indent = " " * args[-1].col_offset  # type: ignore[attr-defined]
        lines = "".join(f"{indent}{a},\n" for a in added)
        if "," not in between:
            return _Edit(last_end, line_start, ",\n" + lines)
        return _Edit(line_start, line_start, lines)
    joined = ", ".join(added)
    if not args:
        return _Edit(close, close, joined)
    return _Edit(close, close, (" " if between.strip() == "," else ", ") + joined) if "," in between else \
        _Edit(last_end, last_end, ", " + joined)


def _imports(tree: ast.Module, raw: bytes, starts: list[int], text: str) -> list[_Edit]:
    needed = sorted({n for n in ("DynamicBatching", "InstanceGroup") if f"{n}(" in text} - _bound_names(tree))
    if not needed:
        return []
    imports = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
    own = next((n for n in imports if isinstance(n, ast.ImportFrom) and n.module == "conch" and not n.level
                and n.lineno == n.end_lineno and not any(a.asname for a in n.names)), None)
    if own is not None:  # `from conch import A, B` on one line: the names join it, sorted
        begin, end = _span(starts, own)
        names = sorted({*(a.name for a in own.names), *needed})
        return [_Edit(begin, end, f"from conch import {', '.join(names)}")]
    at = starts[imports[-1].end_lineno or 0] if imports else 0
    return [_Edit(at, at, f"from conch import {', '.join(needed)}\n")]


def patch_declaration(source: Path, steps: Sequence[StepSpace], chosen: Mapping[StepSpace, Knobs]) -> Patch:
    """The declaration with each step of ``chosen`` set to its knobs; the ensemble file is ``source``."""
    wanted = {s.step: (s, k) for s, k in chosen.items()}
    files: dict[Path, str] = {}
    diffs: list[str] = []
    found: set[str] = set()
    for path in _candidates(source):
        text = path.read_text(encoding="utf-8")
        raw, starts, tree = text.encode("utf-8"), _offsets(text), ast.parse(text)
        edits: list[_Edit] = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                name = _step_name(node)
                if name in wanted and name not in found and (node.args or node.keywords):
                    found.add(name)
                    edits += _call_edits(node, raw, starts, *wanted[name])
        if not edits:
            continue
        new = _apply(raw, edits)
        new = _apply(new.encode("utf-8"), _imports(ast.parse(new), new.encode("utf-8"), _offsets(new), new))
        files[path] = new
        rel = os.path.relpath(path, source.parent)
        diffs.append("".join(difflib.unified_diff(text.splitlines(keepends=True), new.splitlines(keepends=True),
                                                  f"a/{rel}", f"b/{rel}")))
    return Patch(files, "".join(diffs), tuple(sorted(set(wanted) - found)))


def _apply(raw: bytes, edits: list[_Edit]) -> str:
    out = raw
    for e in sorted(edits, key=lambda e: (e.start, e.end), reverse=True):
        out = out[:e.start] + e.text.encode("utf-8") + out[e.end:]
    return out.decode("utf-8")
