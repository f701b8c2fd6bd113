"""The plugin's and the Python API's refusals, in this process (the pytester runs are subprocesses)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import linear_ensemble

from conch.api import BuildReport, BuiltArchive, serve
from conch.archive.manifest import read_manifest
from conch.builder.repository_build import build_ensemble
from conch.errors import ServeError
from conch.pytest_plugin import ConchSession, Source
from conch.replays.recording import write_payload


def test_two_ensembles_of_one_name_are_refused(pytestconfig: pytest.Config, tmp_path: Path) -> None:
    session = ConchSession(pytestconfig)
    session.add(Source("same", tmp_path / "a.py"))
    session.add(Source("same", tmp_path / "a.py"))  # the same file collected twice is the same ensemble
    with pytest.raises(ValueError) as raised:
        session.add(Source("same", tmp_path / "b.py"))
    assert f"ensemble 'same' is in both {tmp_path / 'a.py'} and {tmp_path / 'b.py'}; each name is one TargetModel: " \
        "rename one of them" == str(raised.value)


def test_a_sample_gone_since_collection_says_to_run_again(pytestconfig: pytest.Config, tmp_path: Path) -> None:
    archive = build_ensemble(linear_ensemble("gone"), tmp_path, "local")
    session = ConchSession(pytestconfig)
    with pytest.raises(ServeError) as raised:
        session.sample_of(Source("gone", archive), "renamed", read_manifest(archive))
    assert f"gone.tar.gz has no sample 'renamed' (collected from {archive}); run pytest again" == str(raised.value)
    assert session.sample_of(Source("gone", archive), "two rows", read_manifest(archive)).name == "two rows"


def test_serving_a_build_written_to_two_folders_is_refused(tmp_path: Path) -> None:
    report = BuildReport([BuiltArchive("a", tmp_path / "x" / "a.tar.gz", "local", "24.10"),
                          BuiltArchive("b", tmp_path / "y" / "b.tar.gz", "local", "24.10")])
    with pytest.raises(ServeError) as raised:
        serve(report)
    assert "the build wrote to 2 folders" in str(raised.value)
    assert "one endpoint serves one folder: serve one of them" in str(raised.value)


def test_an_output_conch_has_no_dtype_for_cannot_be_recorded(tmp_path: Path) -> None:
    with pytest.raises(ServeError) as raised:
        write_payload(tmp_path, "c", "c", {"X": np.ones((1, 4), np.float32)}, {"Y": np.ones(2, np.complex64)}, {})
    assert "cannot record an output of dtype complex64: unknown dtype" in str(raised.value)
    assert not list(tmp_path.iterdir())  # nothing half written
