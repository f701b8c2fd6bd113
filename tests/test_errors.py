"""Every ConchError subclass is importable from `conch`, and docs/architecture.md's table gives each its CLI exit
code, as `conch.cli._run` decides it."""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path

import pytest

import conch
from conch.cli import _run
from conch.errors import ConchError

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"


def defined_subclasses() -> set[str]:
    """The names of every class conch's code defines that derives from ConchError, read from its source (so a
    module nothing has imported yet counts)."""
    bases: dict[str, set[str]] = {}
    for path in (ROOT / "conch").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                names = {b.id if isinstance(b, ast.Name) else b.attr for b in node.bases
                         if isinstance(b, ast.Name | ast.Attribute)}
                bases.setdefault(node.name, set()).update(names)
    found = {"ConchError"}
    while True:
        more = {name for name, parents in bases.items() if parents & found} - found
        if not more:
            return found
        found |= more


def loaded_subclasses(cls: type[BaseException]) -> set[type[BaseException]]:
    subs = set(cls.__subclasses__())
    return subs.union(*(loaded_subclasses(s) for s in subs))


def documented() -> dict[str, tuple[str, int]]:
    """The Errors table: class -> (its parent, its exit code)."""
    rows = re.findall(r"^\| `(\w+)` \| `(\w+)` \| .* \| (\d+) \|$", DOC.read_text(encoding="utf-8"), re.MULTILINE)
    return {name: (parent, int(code)) for name, parent, code in rows}


def test_every_conch_error_is_importable_from_conch() -> None:
    names = defined_subclasses()
    assert {"ArchiveError", "BenchError", "DependencyError", "ConfigParseError", "InvokeError"} <= names
    for name in sorted(names):
        assert name in conch.__all__, name
        cls = getattr(conch, name)
        assert issubclass(cls, ConchError) and cls.__name__ == name
    for cls in loaded_subclasses(ConchError):  # every one loaded by now, through the public names
        assert getattr(conch, cls.__name__) is cls, cls


def test_each_error_has_its_exit_code_in_one_table() -> None:
    table = documented()
    assert set(table) == defined_subclasses()
    for name, (parent, code) in table.items():
        cls = getattr(conch, name)
        assert cls.__mro__[1].__name__ == parent, name

        def raising(args: argparse.Namespace, cls: type[ConchError] = cls) -> int:
            exc = cls.__new__(cls)  # whatever else its own __init__ asks for
            ConchError.__init__(exc, f"a {cls.__name__}")
            raise exc

        assert _run(argparse.Namespace(command="run", func=raising)) == code, name


def test_a_corrupt_archive_is_an_archive_error_not_a_build_error(tmp_path: Path) -> None:
    from conch.archive.manifest import read_manifest

    archive = tmp_path / "cut.tar.gz"
    archive.write_bytes(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03garbage")
    with pytest.raises(conch.ArchiveError, match=r"cut.tar.gz is not a readable .tar.gz .*truncated or corrupt") as err:
        read_manifest(archive)
    assert not isinstance(err.value, conch.BuildError)
