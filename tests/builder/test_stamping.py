"""`conch stamp`: one archive under many TargetModel names, each with step model names of its own, byte-identical
for the same inputs, passing `conch check`, and (against the real tritonserver) answering as the original."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from conftest import linear_ensemble
from seed_archives import bert_repo, pack_repo

import conch
from conch.archive.fleet_check import check_archive_models
from conch.archive.inspection import inspect_archive
from conch.archive.manifest import MANIFEST_NAME, read_manifest
from conch.builder.repository_build import build_ensemble
from conch.builder.stamping import stamp_archive, stamp_archives, stamped_name
from conch.errors import ArchiveError


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_ensemble(linear_ensemble("stampme"), tmp_path_factory.mktemp("built"), "local")


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def members(path: Path) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(path) as tar:
        return {m.name: m for m in tar.getmembers()}


def test_a_stamp_renames_the_steps_and_nothing_else(built: Path, tmp_path: Path) -> None:
    stamped = stamp_archive(built, "x-v1", tmp_path)
    assert stamped.archive == tmp_path / "x-v1.tar.gz" and stamped.target_model == "x-v1.tar.gz"
    new = {s: stamped_name(s, "x-v1.tar.gz") for s in ("stampme__double", "stampme__add_one")}
    assert dict(stamped.steps) == new
    before, after = members(built), members(stamped.archive)
    renamed = {name: name.replace("stampme__double", new["stampme__double"]).replace(
        "stampme__add_one", new["stampme__add_one"]) for name in before}
    assert sorted(renamed.values()) == sorted(after)
    with tarfile.open(built) as a, tarfile.open(stamped.archive) as b:
        for old, name in renamed.items():
            assert (after[name].mtime, after[name].uid, after[name].gid, after[name].mode) == (
                946684800, 0, 0, before[old].mode)
            if name.endswith("model.py") or name.endswith("basic_steps.py"):  # model files untouched
                assert a.extractfile(old).read() == b.extractfile(name).read()  # type: ignore[union-attr]
        ensemble = b.extractfile("stampme/config.pbtxt").read().decode()  # type: ignore[union-attr]
    assert f'model_name: "{new["stampme__double"]}"' in ensemble and 'platform: "ensemble"' in ensemble
    assert check_archive_models(stamped.archive)[0].ok, check_archive_models(stamped.archive)[0].lines()


def test_the_same_inputs_give_the_same_bytes(built: Path, tmp_path: Path) -> None:
    one = stamp_archive(built, "x-v1", tmp_path / "one").archive
    two = subprocess.run([sys.executable, "-m", "conch.cli", "stamp", str(built), "--as", "x-v1.tar.gz", "--out",
                          str(tmp_path / "two")], capture_output=True, text=True, timeout=120)
    assert two.returncode == 0, two.stderr
    assert digest(one) == digest(tmp_path / "two" / "x-v1.tar.gz")
    assert digest(stamp_archive(built, "x-v2", tmp_path / "three").archive) != digest(one)


def test_the_manifest_records_the_originals_and_restamping_starts_from_them(built: Path, tmp_path: Path) -> None:
    v1 = stamp_archive(built, "x-v1", tmp_path / "v1").archive
    manifest = read_manifest(v1)
    assert manifest.stamp is not None and manifest.stamp.target_model == "x-v1.tar.gz"
    assert manifest.stamp.steps == {"stampme__add_one": stamped_name("stampme__add_one", "x-v1.tar.gz"),
                                    "stampme__double": stamped_name("stampme__double", "x-v1.tar.gz")}
    assert {s.model_name for s in manifest.steps} == set(manifest.stamp.steps.values())
    assert all(path.split("/")[0] in {"stampme", *manifest.stamp.steps.values()} for path in manifest.files)
    assert manifest.shm is not None and set(manifest.shm.steps) == set(manifest.stamp.steps.values())
    assert read_manifest(built).stamp is None  # an unstamped archive (and every older one) reads as before
    assert (f"stamped for TargetModel x-v1.tar.gz: stampme__add_one -> "
            f"{stamped_name('stampme__add_one', 'x-v1.tar.gz')}, stampme__double -> ") in "\n".join(
        inspect_archive(v1).lines())
    again = stamp_archive(v1, "x-v2", tmp_path / "again").archive
    direct = stamp_archive(built, "x-v2", tmp_path / "direct").archive
    assert digest(again) == digest(direct)
    assert digest(stamp_archive(v1, "x-v1", tmp_path / "same").archive) == digest(v1)


def test_a_hand_made_archive_is_stamped_with_its_environments_working(tmp_path: Path) -> None:
    repo = bert_repo()
    repo["postprocess/config.pbtxt"] = repo["postprocess/config.pbtxt"].replace(  # type: ignore[union-attr]
        b"$$TRITON_MODEL_DIRECTORY/processing_env", b"$$TRITON_MODEL_DIRECTORY/../preprocess/processing_env")
    archive = pack_repo(repo, tmp_path / "bert.tar.gz")
    assert check_archive_models(archive)[0].ok
    stamped = stamp_archive(archive, "bert-2", tmp_path / "out")
    assert not stamped.manifest and set(stamped.steps) == {"bert-trt", "postprocess", "preprocess"}
    assert check_archive_models(stamped.archive)[0].ok, check_archive_models(stamped.archive)[0].lines()
    with tarfile.open(stamped.archive) as tar:
        post = tar.extractfile(f"{stamped.steps['postprocess']}/config.pbtxt").read().decode()  # type: ignore[union-attr]
    assert f"$$TRITON_MODEL_DIRECTORY/../{stamped.steps['preprocess']}/processing_env.tar.gz" in post


def test_bad_names_and_failing_archives_are_refused(built: Path, tmp_path: Path) -> None:
    with pytest.raises(ArchiveError, match=r"TargetModel 'a b': give a file name of ASCII"):
        stamp_archive(built, "a b", tmp_path)
    with pytest.raises(ArchiveError, match=r"TargetModel x-v1.tar.gz given twice"):
        stamp_archives(built, ["x-v1", "x-v1.tar.gz"], tmp_path)
    repo = bert_repo()
    del repo["bert-trt/1/model.plan"]
    with pytest.raises(ArchiveError, match=r"bad.tar.gz fails `conch check`: bert-trt/: has no version folder.*fix it "
                       "before stamping"):
        stamp_archive(pack_repo(repo, tmp_path / "bad.tar.gz"), "b", tmp_path / "out")
    assert not (tmp_path / "out" / "b.tar.gz").exists()


def test_the_library_exposes_the_stamp(built: Path, tmp_path: Path) -> None:
    stamped = conch.stamp_archive(built, "lib", tmp_path)
    assert isinstance(stamped, conch.Stamped) and stamped.archive.is_file()


@pytest.mark.integration
def test_stamped_copies_load_beside_the_original_and_answer_as_it(built: Path, tmp_path: Path, triton: object) -> None:
    """On one real tritonserver without namespacing (where shared step names cannot load together at all):
    the original and two stamps load side by side, and every sample passes on every endpoint."""
    from conch.replays.local_replay import replay_archives

    copies = [s.archive for s in stamp_archives(built, ["stamp-v1", "stamp-v2"], tmp_path)]
    report = replay_archives([built, *copies], server=triton)  # type: ignore[arg-type]
    assert report.passed, report.table()
    assert {r.ensemble for r in report.rows if r.endpoint == "sagemaker-binary"} == {
        "stampme.tar.gz", "stamp-v1.tar.gz", "stamp-v2.tar.gz"}


def test_a_folder_already_holding_the_stamped_name_is_refused(built: Path, tmp_path: Path) -> None:
    from conch.archive.extract import safe_extract
    from conch.archive.verify import check_folder
    from conch.builder.stamping import stamp_folder

    folder = tmp_path / "unpacked"
    safe_extract(built, folder)
    taken = stamped_name("stampme__double", "y.tar.gz")
    (folder / taken).mkdir()
    with pytest.raises(ArchiveError, match=rf"cannot rename step 'stampme__double' to '{taken}': the archive already "
                       "holds a folder of that name"):
        stamp_folder(folder, {"stampme__double": taken}, check_folder(folder, "y.tar.gz").configs)
    assert (folder / "stampme__double").is_dir()  # nothing renamed


def _with_manifest_stamp(archive: Path, dest: Path, steps: dict[str, str]) -> Path:
    """``archive`` repacked with a stamp record in its manifest naming ``steps`` (original -> name in it)."""
    import io
    import json

    out = dest / "forged.tar.gz"
    with tarfile.open(archive) as src, tarfile.open(out, "w:gz") as tar:
        for member in src.getmembers():
            data = src.extractfile(member).read() if member.isfile() else None  # type: ignore[union-attr]
            if member.name == MANIFEST_NAME and data is not None:
                manifest = json.loads(data)
                manifest["stamp"] = {"target_model": "forged.tar.gz", "steps": steps}
                data = json.dumps(manifest).encode()
                member.size = len(data)
            tar.addfile(member, io.BytesIO(data) if data is not None else None)
    return out


def test_a_stamp_record_naming_a_path_is_refused_before_anything_is_renamed(built: Path, tmp_path: Path) -> None:
    """The manifest's original step names become folder names: one that is not a model folder name (``../x``)
    would put the stamped step outside the archive."""
    forged = _with_manifest_stamp(built, tmp_path, {"../escaped": "stampme__double"})
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(ArchiveError, match=r"manifest is not one conch wrote .*stamped step name '\.\./escaped'"):
        stamp_archive(forged, "y-v1", out)
    assert list(out.iterdir()) == []
