"""One HTTP client library per job (docs/architecture.md, "HTTP clients"): httpx makes every sync call of conch,
aiohttp only the local MME's hop to Triton, geventhttpclient only the Locust load of `conch bench`; `requests` is
neither imported by conch nor one of its dependencies. Read from the source, as text: nothing is imported."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import tomllib
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
CONCH = ROOT / "conch"

# client library -> the only modules of conch that may import it (an empty set: none)
ALLOWED: dict[str, set[str]] = {
    "requests": set(),
    "urllib3": set(),
    "aiohttp": {"conch/harness/endpoint/hop.py"},
    "geventhttpclient": {"conch/harness/load/locust_proc.py"},
}


def top_level_imports(path: Path) -> Iterator[tuple[int, str]]:
    """(line, top-level package) of every import in the file, in functions too, ``import_module("x")`` included."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, a.name.split(".")[0]) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            yield node.lineno, node.module.split(".")[0]
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"):
            yield node.lineno, node.args[0].value.split(".")[0]


def importers(package: str, root: Path = CONCH) -> set[str]:
    return {f"{path.relative_to(root.parent).as_posix()}:{line}" for path in sorted(root.rglob("*.py"))
            for line, name in top_level_imports(path) if name == package}


def test_each_http_client_is_imported_only_where_its_job_is() -> None:
    for package, allowed in ALLOWED.items():
        found = importers(package)
        strays = sorted(where for where in found if where.rpartition(":")[0] not in allowed)
        assert not strays, f"{package} is imported outside its job ({sorted(allowed) or 'nowhere'}): {strays}"
        assert {where.rpartition(":")[0] for where in found} == allowed, f"{package}'s one user moved: update ALLOWED"


def test_requests_is_not_a_dependency_of_conch() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    listed = [*project["dependencies"], *(r for extra in project["optional-dependencies"].values() for r in extra)]
    names = {Requirement(r).name.lower() for r in listed}
    assert "requests" not in names
    assert {"httpx", "aiohttp"} <= names


def test_the_check_sees_each_form_of_import(tmp_path: Path) -> None:
    package = tmp_path / "conch"
    package.mkdir()
    (package / "a.py").write_text("import requests.adapters\n")
    (package / "b.py").write_text("def f():\n    from requests import Session\n")
    (package / "c.py").write_text("import importlib\nimportlib.import_module('requests')\n")
    (package / "d.py").write_text("from . import requests\nimport httpx\n")  # a module of its own, and another client
    assert importers("requests", package) == {"conch/a.py:1", "conch/b.py:2", "conch/c.py:2"}
