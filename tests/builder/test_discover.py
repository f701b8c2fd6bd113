"""Sorting what a command is given into built archives and ensemble sources, one way for every command."""

from __future__ import annotations

from pathlib import Path

import pytest

from conch.builder.discover import sort_paths
from conch.errors import ArchiveError


def test_folders_give_their_archives_and_are_sources_when_they_hold_ensemble_files(tmp_path: Path) -> None:
    (tmp_path / "b.tar.gz").write_bytes(b"")
    (tmp_path / "a.tar.gz").write_bytes(b"")
    (tmp_path / "_private.py").write_text("")
    only_private = sort_paths([tmp_path])
    assert only_private.archives == [tmp_path / "a.tar.gz", tmp_path / "b.tar.gz"] and only_private.sources == []
    (tmp_path / "ens.py").write_text("")
    mixed = sort_paths([tmp_path, Path("x.py"), Path("gone.tar.gz")])
    assert mixed.sources == [tmp_path, Path("x.py")] and mixed.archives[-1] == Path("gone.tar.gz")


def test_commands_that_take_archives_only_say_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(ArchiveError, match=r"gone.tar.gz: no such archive; give archives built by `conch build`"):
        sort_paths([tmp_path / "gone.tar.gz"], must_exist=True)
    with pytest.raises(ArchiveError, match=r"deploy takes built archives \(.tar.gz\), not x.py: run `conch build`"):
        sort_paths([Path("x.py")], archives_for="deploy")
    with pytest.raises(ArchiveError, match=r"holds no .tar.gz archives: run `conch build --out"):
        sort_paths([tmp_path], archives_for="bench")
