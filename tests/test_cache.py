"""conch.cache's code digest: what user code a remembered value (a sample's expected outputs, a DALI pipeline)
is keyed by, so an edit of that code is never answered from the cache."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from conch.cache import code_digest


def _module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> object:
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    return importlib.import_module(name)


def test_a_package_beside_the_file_is_part_of_the_digest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``from helpers_pkg.scale import K``: every file of the sibling package counts, not only ``x.py`` siblings."""
    (tmp_path / "helpers_pkg").mkdir()
    (tmp_path / "helpers_pkg" / "__init__.py").write_text("")
    (tmp_path / "helpers_pkg" / "scale.py").write_text("K = 2\n")
    (tmp_path / "uses_pkg.py").write_text("def expected():\n    from helpers_pkg.scale import K\n    return {'K': K}\n")
    fn = _module(tmp_path, monkeypatch, "uses_pkg").expected  # type: ignore[attr-defined]
    before = code_digest(fn)
    assert before is not None
    (tmp_path / "helpers_pkg" / "scale.py").write_text("K = 3.0\n")
    assert code_digest(fn) != before


def test_a_relative_import_inside_a_package_is_followed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pipeline in ``pkg/pipes.py`` doing ``from .ops import resize`` is keyed by ``pkg/ops.py`` too."""
    pkg = tmp_path / "rel_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "ops.py").write_text("SIZE = 224\n")
    (pkg / "pipes.py").write_text("from .ops import SIZE\n\ndef expected():\n    return {'S': SIZE}\n")
    fn = _module(tmp_path, monkeypatch, "rel_pkg.pipes").expected  # type: ignore[attr-defined]
    before = code_digest(fn)
    (pkg / "ops.py").write_text("SIZE = 256\n")
    assert code_digest(fn) != before
    (tmp_path / "unrelated_sibling.py").write_text("x = 1\n")  # a file nothing imports changes nothing
    (pkg / "ops.py").write_text("SIZE = 224\n")
    assert code_digest(fn) == before
