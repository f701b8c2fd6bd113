"""Sorting what a command is given into built archives and ensemble sources, one way for every command."""

from __future__ import annotations

from pathlib import Path

import pytest

from conch.builder.discover import locate, sort_paths
from conch.errors import ArchiveError, DeclarationError


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


def test_an_ensemble_reached_twice_is_found_once_and_a_second_of_its_name_is_refused(tmp_path: Path) -> None:
    declare = ("from conch import Ensemble, PythonStep, Tensor\n"
               "from basic_steps import double\n"
               "ens = Ensemble('dup_{0}', max_batch_size=4)\n"
               "step = PythonStep('double', double, [Tensor('x', 'FP32', [4])], [Tensor('y', 'FP32', [4])], "
               "max_batch_size=4)\n"
               "ens.output('Y', step(ens.input('X', 'FP32', [4])))\n")
    (tmp_path / "conch_discover_one.py").write_text(declare.format("a"))
    (tmp_path / "conch_discover_reexport.py").write_text("from conch_discover_one import ens\n")
    (tmp_path / "conch_discover_twin.py").write_text(declare.format("a"))
    one, reexport, twin = (tmp_path / f"conch_discover_{n}.py" for n in ("one", "reexport", "twin"))
    found = locate([one, reexport, one])
    assert [(path.name, e.name) for path, e in found] == [("conch_discover_one.py", "dup_a")]
    with pytest.raises(DeclarationError, match=r"ensemble name 'dup_a' is declared in both .*conch_discover_one.py "
                                               r"and .*conch_discover_twin.py"):
        locate([one, twin])
