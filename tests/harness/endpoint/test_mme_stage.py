"""Staging for --step-names isolate: the second TargetModel using a step name gets names of its own, and the
renamed archive is still one Triton (and `conch check`) accepts as it is."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import linear_ensemble

from conch.archive.extract import safe_extract
from conch.archive.verify import check_folder
from conch.builder.build import build_ensemble
from conch.harness.endpoint.protocol import ValidationError
from conch.harness.endpoint.stage import StepClaims, isolated_name, read_configs, rename_steps, step_models


@pytest.fixture(scope="module")
def unpacked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    built = tmp_path_factory.mktemp("built")
    folder = built / "model"
    safe_extract(build_ensemble(linear_ensemble("stage"), built, "local"), folder)
    return folder


def test_the_first_target_model_keeps_its_step_names_and_the_next_gets_its_own() -> None:
    claims = StepClaims()
    assert claims.plan("a.tar.gz", ["s__x", "s__y"]) == {}
    renamed = claims.plan("b.tar.gz", ["s__x", "s__y"])
    assert renamed == {"s__x": isolated_name("s__x", "b.tar.gz"), "s__y": isolated_name("s__y", "b.tar.gz")}
    assert claims.plan("b.tar.gz", ["s__x"]) == {"s__x": renamed["s__x"]}  # stable for the same TargetModel
    claims.release("a.tar.gz")
    assert claims.plan("c.tar.gz", ["s__x"]) == {}  # names of deleted files are free again


def test_a_taken_isolated_name_is_not_handed_out_twice() -> None:
    claims = StepClaims()
    claims.plan("a", ["s"])
    claims.owners[isolated_name("s", "b")] = "squatter"
    assert claims.plan("b", ["s"]) == {"s": isolated_name("s", "b", 1)}


def test_renamed_steps_keep_the_archive_valid(unpacked: Path, tmp_path: Path) -> None:
    folder = tmp_path / "model"
    shutil.copytree(unpacked, folder)
    configs = read_configs(folder)
    steps = step_models(configs)
    assert steps == ["stage__add_one", "stage__double"]
    renames = {s: isolated_name(s, "copy.tar.gz") for s in steps}
    rename_steps(folder, "copy.tar.gz", renames, configs)
    configs = read_configs(folder)
    assert sorted(configs) == sorted([*renames.values(), "stage"])
    assert [s.model_name for s in configs["stage"].ensemble_scheduling.step] == [
        renames["stage__double"], renames["stage__add_one"]]
    report = check_folder(folder, "copy.tar.gz")
    assert report.ok, report.lines()
    assert report.ensemble == "stage"  # the front end still finds the ensemble by its text


def test_a_rename_onto_a_folder_of_the_archive_is_refused(unpacked: Path, tmp_path: Path) -> None:
    folder = tmp_path / "model"
    shutil.copytree(unpacked, folder)
    with pytest.raises(ValidationError, match="--step-names shared"):
        rename_steps(folder, "copy.tar.gz", {"stage__double": "stage__add_one"}, read_configs(folder))
    assert check_folder(folder, "copy.tar.gz").ok  # nothing was changed
