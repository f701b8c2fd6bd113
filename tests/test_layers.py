"""The layers of docs/architecture.md hold: each part of conch imports only parts on its own layer or below
(imports inside functions and under TYPE_CHECKING included), two parts on one layer do not import each other,
and no modules import each other in a circle. Read from the source, as text: nothing is imported."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

CONCH = Path(__file__).resolve().parent.parent / "conch"

# Lowest first. A part is a subpackage of conch or a module at its root ("__init__" is the package root).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "cache", "version", "startup_lines", "templates"),
    ("scratch", "aws", "triton_wheel", "diagram", "stub_types", "model_worker"),
    ("ensembles", "atomic_write"),  # the declaration; the one atomic file writer
    ("backends", "compiler", "wire", "verdicts", "image_python"),
    ("executor_child",),  # a Python step of that run in a child process on the image's Python
    ("executor",),  # the compiled plan run in this process
    ("archive",),  # reading archives
    ("builder",),  # writing them
    ("triton", "sagemaker"),  # the local tritonserver and its clients; boto3
    ("replays", "endpoint"),  # replaying samples; the local MME
    ("perf",),  # load runs, profiles, tune, the probe
    ("api",),  # conch.build, conch.replay, conch.serve and their report objects
    ("__init__", "plan"),
    ("importer",),
    ("cli", "pytest_plugin"),  # pytest_plugin: `pytest --conch`, samples as test items
    ("__main__",),  # `python -m conch`
)
RANK = {part: rank for rank, parts in enumerate(LAYERS) for part in parts}

def part_of(module: str) -> str:
    """`conch.builder.repository_build` -> builder; `conch` -> __init__."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def module_of(path: Path) -> str:
    rel = path.relative_to(CONCH.parent).with_suffix("")
    names = list(rel.parts)
    return ".".join(names[:-1] if names[-1] == "__init__" else names)


def imports(path: Path) -> Iterator[tuple[int, str]]:
    """(line, conch module) for every import of conch in the file, ``importlib.import_module("conch.x")``
    with a literal name included."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and _names_import_module(node.func) and node.args:
            name = node.args[0]
            if isinstance(name, ast.Constant) and isinstance(name.value, str) and name.value.split(".")[0] == "conch":
                yield node.lineno, name.value
        elif isinstance(node, ast.Import):
            yield from ((node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "conch")
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module_of(path) if path.name == "__init__.py" else module_of(path).rpartition(".")[0]
                base = ".".join([*package.split(".")[: len(package.split(".")) - node.level + 1], base]).rstrip(".")
            if base.split(".")[0] != "conch":
                continue
            for alias in node.names:  # `from conch.x import y` may name a module y
                candidate = f"{base}.{alias.name}"
                yield node.lineno, candidate if _is_module(candidate) else base


def _names_import_module(func: ast.expr) -> bool:
    return (isinstance(func, ast.Attribute) and func.attr == "import_module") or (
        isinstance(func, ast.Name) and func.id == "import_module")


def _is_module(name: str) -> bool:
    path = CONCH.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


SOURCES = sorted(p for p in CONCH.rglob("*.py") if "__pycache__" not in p.parts)


def test_every_part_of_conch_is_on_a_layer() -> None:
    unplaced = sorted({part_of(module_of(p)) for p in SOURCES} - set(RANK))
    assert not unplaced, f"add {unplaced} to LAYERS (and to docs/architecture.md)"


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(CONCH.parent)))
def test_no_import_climbs_a_layer_or_crosses_one(path: Path) -> None:
    own = part_of(module_of(path))
    wrong = [f"line {line}: {module} ({part_of(module)})" for line, module in imports(path)
             if part_of(module) != own and RANK[part_of(module)] >= RANK[own]]
    assert not wrong, f"{path.name} ({own}, layer {RANK[own]}) imports from its own layer or above: {wrong}"


def test_no_modules_import_each_other_in_a_circle() -> None:
    graph: dict[str, set[str]] = {module_of(p): set() for p in SOURCES}
    for p in SOURCES:
        graph[module_of(p)] |= {m for _, m in imports(p)
                                 if m in graph and m != module_of(p)}
    circles = [c for c in _strongly_connected(graph) if len(c) > 1]
    assert not circles, f"modules that import each other: {circles}"


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iteratively."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                found.append(sorted(component))
    return found


def test_the_checks_see_imports_and_circles() -> None:
    """The checks above can fail: the import reader finds a module's imports of conch, and the circle finder
    finds a circle and none in a chain."""
    build = {module for _, module in imports(CONCH / "cli" / "build.py")}
    assert {"conch.builder.parallel", "conch.cli.console", "conch.ensembles.target"} <= build
    assert RANK[part_of("conch.builder.parallel")] < RANK[part_of("conch.cli.build")]
    assert sorted(map(sorted, _strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}))) == [
        ["a", "b", "c"], ["d"]]
    assert all(len(c) == 1 for c in _strongly_connected({"a": {"b"}, "b": {"c"}, "c": set()}))


def test_an_import_by_a_literal_name_counts(tmp_path: Path) -> None:
    source = tmp_path / "late.py"
    source.write_text("import importlib\n\ndef f():\n    return importlib.import_module('conch.cli.build')\n")
    assert list(imports(source)) == [(4, "conch.cli.build")]


LAYOUT = CONCH.parent / "docs" / "layout.md"


def _layout_paths() -> set[str]:
    """Every `conch/...` path docs/layout.md names in code spans, without a trailing slash."""
    text = LAYOUT.read_text(encoding="utf-8")
    return {m.rstrip("/") for m in re.findall(r"`(conch/[^`\s]*)`", text)}


def test_every_path_docs_layout_names_exists() -> None:
    missing = sorted(p for p in _layout_paths() if not (CONCH.parent / p).exists())
    assert not missing, f"docs/layout.md names paths that are not in the tree: {missing}"


def test_docs_layout_names_every_part_of_conch() -> None:
    named = _layout_paths()
    parts = {f"conch/{p.name}" for p in CONCH.iterdir()
             if p.name != "__pycache__" and (p.suffix == ".py" or (p / "__init__.py").is_file())}
    unnamed = sorted(parts - named)
    assert not unnamed, f"docs/layout.md does not say where these live: {unnamed}"
