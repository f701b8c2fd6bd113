"""A Python step's files= entry may be a folder: it ships with everything under it (build and in-process
run), and a path that does not exist is refused naming the step, the entry and the fix."""

from __future__ import annotations

from pathlib import Path

import basic_steps
import numpy as np
import pytest

from conch import BuildError, Ensemble, PythonStep, Tensor
from conch.builder.repository_build import render_repository
from conch.executor import Executor, run


def _ensemble(assets: Path, **extra: bytes) -> Ensemble:
    ens = Ensemble("folder_files", max_batch_size=4)
    step = PythonStep("prefix", basic_steps.FolderPrefixer, inputs=[Tensor("TEXT", "BYTES", [1])],
                      outputs=[Tensor("OUT", "BYTES", [1])], files={"assets": assets, **extra}, max_batch_size=4)
    ens.output("OUT", step(ens.input("TEXT", "BYTES", [1])))
    return ens


def test_a_folder_in_files_ships_whole_and_the_step_reads_inside_it(tmp_path: Path) -> None:
    assets = tmp_path / "assets"
    (assets / "nested").mkdir(parents=True)
    (assets / "nested" / "prefix.txt").write_bytes(b">> \n")
    (assets / "other.bin").write_bytes(b"\x00\x01")
    ens = _ensemble(assets)
    shipped = sorted(name for name in render_repository(ens, "local", "24.10").files if "/assets/" in name)
    assert [name.split("/assets/", 1)[1] for name in shipped] == ["nested/prefix.txt", "other.bin"]
    answer = run(ens, {"TEXT": np.array([[b"hello"]], dtype=object)})
    assert answer.outputs["OUT"].tolist() == [[b">> hello"]]


def test_an_empty_folder_entry_is_a_folder_in_the_run_as_in_the_archive(tmp_path: Path) -> None:
    assets = tmp_path / "assets"
    (assets / "nested").mkdir(parents=True)
    (assets / "nested" / "prefix.txt").write_bytes(b">> \n")
    ens = _ensemble(assets, **{"cache/": b""})
    with Executor(ens) as executor:
        executor.run({"TEXT": np.array([[b"hello"]], dtype=object)})
        placed = [p for p in executor._workdir.rglob("cache")]
        assert len(placed) == 1 and placed[0].is_dir()


def test_a_files_entry_that_does_not_exist_names_the_step_and_the_fix(tmp_path: Path) -> None:
    with pytest.raises(BuildError, match=r"python step 'prefix': file 'assets' points at .*missing, which does not "
                                         r"exist; fix the path in files= \(a file, or a folder shipped with"):
        render_repository(_ensemble(tmp_path / "missing"), "local", "24.10")
