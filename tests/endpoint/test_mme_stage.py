"""Staging for --step-names isolate: the second TargetModel using a step name gets names of its own, and the
renamed archive is still one Triton (and `conch check`) accepts as it is."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest
from conftest import REFUSED_URL, linear_ensemble

from conch.archive.extract import safe_extract
from conch.archive.verify import check_folder
from conch.builder.repository_build import build_ensemble
from conch.builder.stamping import stamped_name, step_models
from conch.endpoint.disk import DiskCache
from conch.endpoint.fleet import Budgets, Fleet, Model
from conch.endpoint.hop import TritonHop
from conch.endpoint.metrics import Metrics
from conch.endpoint.protocol import ValidationError
from conch.endpoint.sources import open_source
from conch.endpoint.stage import StepClaims, rename_steps
from conch.endpoint.step_names import StepNames


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_ensemble(linear_ensemble("stage"), tmp_path_factory.mktemp("built"), "local")


@pytest.fixture(scope="module")
def unpacked(built: Path) -> Path:
    folder = built.parent / "model"
    safe_extract(built, folder)
    return folder


def test_the_first_target_model_keeps_its_step_names_and_the_next_gets_its_own() -> None:
    claims = StepClaims()
    assert claims.plan("a.tar.gz", ["s__x", "s__y"]) == {}
    renamed = claims.plan("b.tar.gz", ["s__x", "s__y"])
    assert renamed == {"s__x": stamped_name("s__x", "b.tar.gz"), "s__y": stamped_name("s__y", "b.tar.gz")}
    assert claims.plan("b.tar.gz", ["s__x"]) == {"s__x": renamed["s__x"]}  # stable for the same TargetModel
    claims.release("a.tar.gz")
    assert claims.plan("c.tar.gz", ["s__x"]) == {}  # names of deleted files are free again


def test_a_taken_isolated_name_is_not_handed_out_twice() -> None:
    claims = StepClaims()
    claims.plan("a", ["s"])
    claims.owners[stamped_name("s", "b")] = "squatter"
    assert claims.plan("b", ["s"]) == {"s": stamped_name("s", "b", 1)}


def test_renamed_steps_keep_the_archive_valid(unpacked: Path, tmp_path: Path) -> None:
    folder = tmp_path / "model"
    shutil.copytree(unpacked, folder)
    configs = check_folder(folder, "model.tar.gz").configs
    steps = step_models(configs)
    assert steps == ["stage__add_one", "stage__double"]
    renames = {s: stamped_name(s, "copy.tar.gz") for s in steps}
    rename_steps(folder, "copy.tar.gz", renames, configs)
    configs = check_folder(folder, "copy.tar.gz").configs
    assert sorted(configs) == sorted([*renames.values(), "stage"])
    assert [s.model_name for s in configs["stage"].ensemble_steps] == [
        renames["stage__double"], renames["stage__add_one"]]
    report = check_folder(folder, "copy.tar.gz")
    assert report.ok, report.lines()
    assert report.ensemble == "stage"  # the front end still finds the ensemble by its text


def test_a_rename_onto_a_folder_of_the_archive_is_refused(unpacked: Path, tmp_path: Path) -> None:
    folder = tmp_path / "model"
    shutil.copytree(unpacked, folder)
    with pytest.raises(ValidationError, match="--step-names shared"):
        rename_steps(folder, "copy.tar.gz", {"stage__double": "stage__add_one"},
                     check_folder(folder, "copy.tar.gz").configs)
    assert check_folder(folder, "copy.tar.gz").ok  # nothing was changed


def test_a_fetch_stages_two_copies_with_the_second_renamed(built: Path, tmp_path: Path) -> None:
    """Download, unpack, `conch check` and staging of two copies (isolate: the second's steps renamed); the
    renamed copy passes `conch check` (benchmarks/config_parses.py counts the config parses)."""
    source = tmp_path / "src"
    source.mkdir()
    for name in ("a.tar.gz", "b.tar.gz"):
        shutil.copyfile(built, source / name)

    async def fetch_both() -> list[Model]:
        hop = TritonHop(REFUSED_URL)  # the fetch and the staging never call Triton; loading is not counted here
        fleet = Fleet(open_source(source), DiskCache(tmp_path / "cache"), hop, Metrics(), Budgets(), lambda: 0,
                      step_names=StepNames.ISOLATE)
        try:
            models = [Model("a.tar.gz"), Model("b.tar.gz")]
            for model in models:
                await fleet._fetch(model)
            return models
        finally:
            await hop.close()

    first, second = asyncio.run(fetch_both())
    assert first.folder is not None and second.folder is not None
    assert sorted(p.name for p in first.folder.iterdir() if p.is_dir()) == ["stage", "stage__add_one", "stage__double"]
    renamed = sorted(p.name for p in second.folder.iterdir() if p.is_dir())
    assert renamed == sorted(["stage", stamped_name("stage__add_one", "b.tar.gz"),
                              stamped_name("stage__double", "b.tar.gz")])
    assert check_folder(second.folder, "b.tar.gz").ok
