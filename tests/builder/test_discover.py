"""Sorting what a command is given into built archives and ensemble sources, one way for every command."""

from __future__ import annotations

import hashlib
import os
import py_compile
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conch.builder.discover import load_module_ensembles, locate, sort_paths
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
               "step = PythonStep('double', double, inputs=[Tensor('x', 'FP32', [4])], "
               "outputs=[Tensor('y', 'FP32', [4])], max_batch_size=4)\n"
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


def test_a_declaration_written_again_within_the_second_of_its_bytecode_runs_its_new_code(tmp_path: Path) -> None:
    """Python takes a bytecode cache as current when the source's size and whole-second mtime match it: a
    declaration rewritten within that second at the same size (4 -> 8) would run its old code, and conch, whose
    keys hash the new bytes, would build yesterday's config under today's key."""
    name = f"racy_{hashlib.sha256(str(tmp_path).encode()).hexdigest()[:12]}"
    path = tmp_path / f"{name}.py"
    second = (time.time_ns() // 10**9 - 100) * 10**9  # a whole second in the past: the clock cannot tick within it

    def write(batch: int, at_ns: int) -> None:
        path.write_text(f"from conch import Ensemble\nens = Ensemble('racy', max_batch_size={batch})\n")
        os.utime(path, ns=(at_ns, at_ns))

    write(4, second + 100_000_000)
    cached = py_compile.compile(str(path), invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)
    os.utime(cached, ns=(second + 300_000_000,) * 2)
    write(8, second + 600_000_000)
    plain_python = subprocess.run([sys.executable, "-c", f"import {name}; print({name}.ens.max_batch_size)"],
                                  cwd=tmp_path, capture_output=True, text=True, check=True)
    assert plain_python.stdout.strip() == "4", "the premise: Python itself runs the cached, older code"

    try:
        (ens,) = load_module_ensembles(path)
        assert ens.max_batch_size == 8
    finally:
        sys.modules.pop(name, None)


def test_a_file_edited_after_conch_imported_it_is_imported_again_with_the_siblings_it_imports(
        tmp_path: Path) -> None:
    """A notebook's loop: `conch.build("pipes.py")`, edit the file or a helper beside it, build again. Python keeps
    the first import in sys.modules; conch imports both files again when their bytes changed, and not otherwise."""
    name = f"edited_{hashlib.sha256(str(tmp_path).encode()).hexdigest()[:12]}"
    helper = f"{name}_helper"
    path = tmp_path / f"{name}.py"
    (tmp_path / f"{helper}.py").write_text("BATCH = 4\n")
    path.write_text(f"from conch import Ensemble\nimport {helper}\n"
                    f"ens = Ensemble('edited', max_batch_size={helper}.BATCH)\n")
    try:
        (first,) = load_module_ensembles(path)
        assert first.max_batch_size == 4
        assert load_module_ensembles(path) == [first], "an unchanged file is not run again"
        path.write_text(path.read_text().replace(".BATCH)", ".BATCH * 2)"))
        assert [e.max_batch_size for e in load_module_ensembles(path)] == [8]
        (tmp_path / f"{helper}.py").write_text("BATCH = 5\n")
        assert [e.max_batch_size for e in load_module_ensembles(path)] == [10]
    finally:
        sys.modules.pop(name, None)
        sys.modules.pop(helper, None)
