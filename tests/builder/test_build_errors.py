"""Build-time mistakes a user can make, each refused with an error naming the thing and the fix: a file
the system refuses to read, conda environments conch or conda-pack cannot pack, a path that is not an
archive, a warmup payload with an empty tensor."""

from __future__ import annotations

import json
from pathlib import Path

import basic_steps
import numpy as np
import pytest

from conch import BuildError, Ensemble, PackError, PythonEnv, PythonStep, Tensor
from conch.archive.extract import safe_extract
from conch.builder.pack import pack
from conch.builder.repository_build import render_repository
from conch.errors import ArchiveError


def test_a_file_the_system_refuses_to_read_names_the_step_and_the_file() -> None:
    """A declared file that exists but cannot be read (without read permission for the user building;
    the tests run as root, so a file the kernel refuses to read stands in for it)."""
    unreadable = Path("/proc/self/mem")
    assert unreadable.is_file()
    ens = Ensemble("unreadable", max_batch_size=4)
    step = PythonStep("double", basic_steps.double, inputs=[Tensor("x", "FP32", [4])],
                      outputs=[Tensor("y", "FP32", [4])],
                      max_batch_size=4, files={"weights.bin": unreadable})
    ens.output("Y", step(ens.input("X", "FP32", [4])))
    with pytest.raises(BuildError, match=r"step 'double': cannot read a file it lays out: .*Input/output error"):
        render_repository(ens, "production", "24.10")


def test_a_conda_environment_without_a_python_record_says_what_is_missing(tmp_path: Path) -> None:
    (tmp_path / "env" / "conda-meta").mkdir(parents=True)
    with pytest.raises(PackError, match=r"cannot tell which Python the conda environment .*env holds "
                                        r"\(no conda-meta/python-\*.json\)"):
        pack(PythonEnv(conda_prefix=tmp_path / "env"), "3.10")


def test_a_conda_environment_conda_pack_refuses_passes_on_its_reason(tmp_path: Path) -> None:
    """conda-pack will not pack a `pip install -e` package (its files live outside the environment)."""
    prefix = tmp_path / "editable"
    (prefix / "conda-meta").mkdir(parents=True)
    (prefix / "conda-meta" / "history").write_text("")
    record = {"name": "python", "version": "3.10.12", "build": "h0", "build_number": 0, "files": [],
              "channel": "https://conda.anaconda.org/conda-forge/linux-64", "paths_data": {"paths": []}}
    (prefix / "conda-meta" / "python-3.10.12-h0.json").write_text(json.dumps(record))
    dist_info = prefix / "lib" / "python3.10" / "site-packages" / "mypkg-1.0.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "direct_url.json").write_text(json.dumps({"url": "file:///src/mypkg", "dir_info": {"editable": True}}))
    with pytest.raises(PackError, match=r"conda-pack could not pack .*editable: Cannot pack an environment with "
                                        r"editable packages(.|\n)*- mypkg"):
        pack(PythonEnv(conda_prefix=prefix), "3.10")


def test_a_conda_environment_with_a_damaged_package_record_is_a_pack_error(tmp_path: Path) -> None:
    """A conda-meta record missing the fields conda-pack reads (here an empty object) is named, not a
    KeyError traceback from inside conda-pack."""
    prefix = tmp_path / "damaged"
    (prefix / "conda-meta").mkdir(parents=True)
    (prefix / "conda-meta" / "python-3.10.12-h0.json").write_text("{}")
    with pytest.raises(PackError, match=r"conda-pack could not read the package records of .*damaged \(KeyError: "
                                        r".*\); a conda-meta/\*\.json file is damaged: recreate the environment"):
        pack(PythonEnv(conda_prefix=prefix), "3.10")


def test_a_folder_given_as_an_archive_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "x.tar.gz"
    folder.mkdir()
    with pytest.raises(ArchiveError, match=r"archive .*x.tar.gz is not a file; give the path of a .tar.gz"):
        safe_extract(folder, tmp_path / "out")


def test_a_warmup_payload_with_an_empty_tensor_is_refused_at_build(tmp_path: Path) -> None:
    ens = Ensemble("empty_warmup", max_batch_size=4)
    step = PythonStep("double", basic_steps.double, inputs=[Tensor("x", "FP32", [-1])],
                      outputs=[Tensor("y", "FP32", [-1])],
                      max_batch_size=4)
    ens.output("Y", step(ens.input("X", "FP32", [-1])))
    ens.warmup({"X": np.zeros((1, 0), np.float32)})
    with pytest.raises(BuildError, match=r"warmup tensor of shape \[0\] is empty; Triton cannot warm with it"):
        render_repository(ens, "production", "24.10")
