"""The typed manifest: one writer, one reader for an archive (streaming) or a folder, older and
newer ones and broken ones refused naming the archive."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import linear_ensemble
from hostile_archives import write_archive

from conch.archive.manifest import FORMAT, MANIFEST_NAME, Manifest, dumps, read_manifest
from conch.builder.repository_build import build_ensemble, render_repository, write_repository
from conch.ensembles.samples import Tolerance
from conch.errors import ArchiveError


def _tar(path: Path, files: dict[str, bytes]) -> Path:
    return write_archive(path, [(name, "file", data) for name, data in files.items()])


def test_the_archive_the_folder_and_the_build_hold_the_same_manifest(tmp_path: Path) -> None:
    ens = linear_ensemble("typed")
    ens.warmup("two rows")
    repo = render_repository(ens, "local", "24.10")
    archive = build_ensemble(ens, tmp_path / "dist", "local", "24.10")
    folder = write_repository(repo, tmp_path / "repo")
    typed = read_manifest(archive)
    assert typed == read_manifest(folder) == repo.record
    assert Manifest.from_json(json.loads(dumps(typed))) == typed
    assert (typed.ensemble, typed.target, typed.release, typed.format) == ("typed", "local", "24.10", FORMAT)
    assert [s.model_name for s in typed.steps] == ["typed__double", "typed__add_one"]
    assert typed.warmup is not None and typed.warmup.source == "sample 'two rows'"
    assert typed.shm is not None and set(typed.shm.steps) == {"typed__double", "typed__add_one"}
    (sample,) = typed.samples
    np.testing.assert_array_equal(sample.expected_arrays()["Z"], sample.input_arrays()["X"] * 2 + 1)
    assert sample.checks == {"Z": Tolerance()}


def test_a_format_1_manifest_is_refused_asking_for_a_rebuild(tmp_path: Path) -> None:
    """Format 1 (one tolerance per sample) was never released; its manifests lack ``checks``."""
    data = render_repository(linear_ensemble("old"), "local", "24.10").manifest
    for sample in data["samples"]:
        del sample["checks"]
        sample["tolerance"] = {"atol": 1e-3, "rtol": None, "cosine": None, "argmax": True}
    data["format"] = 1
    with pytest.raises(ArchiveError, match=r"old.tar.gz: its manifest lacks 'checks' or has it in another form; "
                                           r"rebuild the archive with `conch build`"):
        read_manifest(_tar(tmp_path / "old.tar.gz", {MANIFEST_NAME: json.dumps(data).encode()}))


def test_a_manifest_from_a_newer_conch_is_refused_naming_the_archive(tmp_path: Path) -> None:
    data = render_repository(linear_ensemble("new"), "local", "24.10").manifest
    data["format"] = FORMAT + 1
    archive = _tar(tmp_path / "new.tar.gz", {MANIFEST_NAME: json.dumps(data).encode()})
    with pytest.raises(ArchiveError, match=rf"new.tar.gz: its conch-manifest.json has format {FORMAT + 1}, newer than "
                                           rf"this conch reads \(up to {FORMAT}\); upgrade conch, or rebuild"):
        read_manifest(archive)


@pytest.mark.parametrize(("files", "message"), [
    ({"m/config.pbtxt": b"name: 'm'"}, r"none.tar.gz has no conch-manifest.json \(not built by conch\?\)"),
    ({MANIFEST_NAME: b"{oops"}, r"none.tar.gz: its conch-manifest.json is not JSON"),
    ({MANIFEST_NAME: b'{"ensemble": "x"}'}, r"none.tar.gz: its manifest lacks 'target' or has it in another form"),
    ({MANIFEST_NAME: b"[1, 2]"}, r"none.tar.gz: its manifest is not one conch wrote \(a JSON object was expected"),
])
def test_a_missing_or_broken_manifest_is_one_archive_error(tmp_path: Path, files: dict[str, bytes],
                                                           message: str) -> None:
    with pytest.raises(ArchiveError, match=message):
        read_manifest(_tar(tmp_path / "none.tar.gz", files))


def test_unreadable_and_absent_archives(tmp_path: Path) -> None:
    (tmp_path / "text.tar.gz").write_text("not gzip")
    with pytest.raises(ArchiveError, match=r"text.tar.gz is not a readable .tar.gz"):
        read_manifest(tmp_path / "text.tar.gz")
    with pytest.raises(ArchiveError, match=r"absent.tar.gz: no such archive"):
        read_manifest(tmp_path / "absent.tar.gz")
    with pytest.raises(ArchiveError, match=r"has no conch-manifest.json"):
        read_manifest(tmp_path)  # a folder without one


def test_the_reader_stops_at_the_manifest(tmp_path: Path) -> None:
    """Streaming: what follows the manifest is never read, so a damaged tail does not matter to it."""
    archive = build_ensemble(linear_ensemble("streamed"), tmp_path, "local")
    data = archive.read_bytes()
    truncated = tmp_path / "truncated.tar.gz"
    truncated.write_bytes(data[: len(data) // 2])  # the manifest sorts before the model folders
    assert read_manifest(truncated) == read_manifest(archive)


def test_an_unknown_output_check_is_refused_naming_it(tmp_path: Path) -> None:
    data = render_repository(linear_ensemble("odd_check"), "local", "24.10").manifest
    data["samples"][0]["checks"]["Z"] = {"kind": "fuzzy"}
    archive = _tar(tmp_path / "odd_check.tar.gz", {MANIFEST_NAME: json.dumps(data).encode()})
    with pytest.raises(ArchiveError, match=r"odd_check.tar.gz: its manifest is not one conch wrote \(unknown output "
                                           r"check 'fuzzy'\)"):
        read_manifest(archive)
