"""buildcache's per-process memos answer as the calls they stand for: the archive's real path (its build record's
name) and the cache folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conch.builder import buildcache
from conch.cache import cache_dir


def test_an_archives_real_path_is_what_resolve_says(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through a linked folder, from a relative path, and for an archive that is itself a link."""
    (tmp_path / "real").mkdir()
    (tmp_path / "linked").symlink_to(tmp_path / "real")
    (tmp_path / "real" / "elsewhere.tar.gz").write_bytes(b"")
    (tmp_path / "real" / "link.tar.gz").symlink_to("elsewhere.tar.gz")
    monkeypatch.chdir(tmp_path)
    for archive in (tmp_path / "linked" / "a.tar.gz", Path("linked/a.tar.gz"), Path("linked/link.tar.gz"),
                    tmp_path / "real" / "a.tar.gz"):
        assert buildcache._real_path(archive) == str(archive.resolve())


def test_the_cache_folder_follows_its_setting_the_working_folder_and_home(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    monkeypatch.setenv("CONCH_CACHE_DIR", "relative-cache")
    for here in ("one", "two", "one"):
        monkeypatch.chdir(tmp_path / here)
        assert buildcache._cache_root() == cache_dir() == tmp_path / here / "relative-cache"
    monkeypatch.delenv("CONCH_CACHE_DIR")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert buildcache._cache_root() == cache_dir() == tmp_path / "home" / ".cache" / "conch"
    assert os.path.isdir(tmp_path / "home" / ".cache" / "conch")
