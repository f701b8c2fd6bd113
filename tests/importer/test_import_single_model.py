"""`conch import` of a single-model archive (one model folder, as python_backend's add_sub is packed): declared as
an ensemble of that one step, which `conch build` writes back as the model alone; its captured samples are the
--payload the original archive replays with."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from seed_archives import pack_repo
from single_models import ADD_SUB_CONFIG, add_sub_repo, simple_repo, write_repo

from conch.archive.fleet_check import check_archive_models
from conch.builder.repository_build import build_ensemble
from conch.ensembles.payloads import read_payload_file
from conch.errors import BuildError
from conch.importer.convert import import_sources
from conch.replays.local_replay import replay_archives
from conch.triton.server import LocalTriton


def load_module(path: Path) -> object:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_single_model_archive_imports_builds_alone_and_replays(tmp_path: Path, triton: LocalTriton) -> None:
    archive = pack_repo(add_sub_repo(), tmp_path / "add_sub.tar.gz")
    (imported,) = import_sources([archive], tmp_path / "out", samples=True)
    assert imported.ensemble == "add_sub_alone" and imported.files_identical == 1 and imported.configs_equal == 1
    assert imported.messages == ["add_sub/config.pbtxt: a single-model archive: declared as an ensemble "
                                 "'add_sub_alone' of this one step, which `conch build` writes as the model alone"]
    module = load_module(imported.module)
    rebuilt = build_ensemble(module.add_sub_alone, tmp_path / "dist", "local")  # type: ignore[attr-defined]
    assert check_archive_models(rebuilt)[0].single == "add_sub"
    samples = read_payload_file(imported.module.with_suffix(".samples.json"))  # the samples `conch import` wrote
    report = replay_archives([archive, rebuilt], server=triton, payloads=samples)
    assert report.passed and len(report.rows) == 8, report.table()


def test_a_single_model_named_after_its_folder_is_named_after_the_repository(tmp_path: Path) -> None:
    folder = write_repo(simple_repo(), tmp_path / "repo")
    (imported,) = import_sources([folder], tmp_path / "out", samples=False)
    assert imported.ensemble == "repo" and imported.configs_equal == 1


@pytest.mark.parametrize("packed", [False, True], ids=["folder", "root-config-archive"])
def test_a_model_folder_imports_as_the_same_model_one_folder_down(tmp_path: Path, packed: bool) -> None:
    """`conch import MODEL_FOLDER` (config.pbtxt at its root) imports as the repository holding it does."""
    model = write_repo(add_sub_repo(""), tmp_path / "add_sub")
    source = pack_repo(add_sub_repo(""), tmp_path / "add_sub.tar.gz") if packed else model
    (imported,) = import_sources([source], tmp_path / "out", samples=False)
    (down,) = import_sources([write_repo(add_sub_repo(), tmp_path / "repo")], tmp_path / "down", samples=False)
    assert (imported.ensemble, imported.configs_equal, imported.files_identical) == ("add_sub_alone", 1, 1)
    assert (down.configs_equal, down.files_identical) == (1, 1)
    module = load_module(imported.module)
    rebuilt = build_ensemble(module.add_sub_alone, tmp_path / "dist", "local")  # type: ignore[attr-defined]
    assert check_archive_models(rebuilt)[0].single == "add_sub"


def test_a_single_model_without_declared_io_is_refused(tmp_path: Path) -> None:
    bare = ADD_SUB_CONFIG.split("input [")[0]
    folder = write_repo({**add_sub_repo(), "add_sub/config.pbtxt": bare.encode()}, tmp_path / "repo")
    with pytest.raises(BuildError, match=r"add_sub/config.pbtxt: a single model whose config declares no inputs or "
                       r"outputs; conch import needs them to declare its callers' tensors: declare them in the config"):
        import_sources([folder], tmp_path / "out", samples=False)
