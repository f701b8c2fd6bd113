"""Each config.pbtxt is parsed once, by the one config reader, per `conch check` (alone and as a fleet) and
per `conch inspect`: the check's parsed configs are what the fleet check and the inspection go on with."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from config_parses import ROUND_TRIP, counted, once_each
from conftest import linear_ensemble

from conch.archive.fleet_check import check_archive_models
from conch.archive.inspection import inspect_archive
from conch.builder.repository_build import build_ensemble
from conch.cli import main


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_ensemble(linear_ensemble("parsed"), tmp_path_factory.mktemp("built"), "local")


def test_conch_check_of_one_archive_parses_each_config_once(built: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with counted(monkeypatch, built) as parses:
        report = check_archive_models(built)[0]
    assert report.ok and sorted(report.configs) == ["parsed", "parsed__add_one", "parsed__double"]
    assert parses == once_each(built)


def test_conch_check_of_a_fleet_parses_each_config_of_each_archive_once(
    built: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    archives = [tmp_path / "a.tar.gz", tmp_path / "b.tar.gz"]
    for archive in archives:
        shutil.copyfile(built, archive)
    with counted(monkeypatch, *archives) as parses:
        status = main(["check", *map(str, archives)])
    out = capsys.readouterr()
    assert status == 1  # the copies share step names: the fleet check found them, from the check's configs
    assert "a.tar.gz, b.tar.gz both hold step models parsed__add_one, parsed__double" in out.out + out.err
    assert parses == once_each(*archives)


def test_conch_inspect_parses_each_config_once(built: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with counted(monkeypatch, built) as parses:
        inspection = inspect_archive(built)
    assert inspection.check.ok and [m.model for m in inspection.models] == [
        "parsed", "parsed__add_one", "parsed__double"]
    del parses[ROUND_TRIP]  # the typed reader (what inspect's carried fields come from) re-reads its rendering
    assert parses == once_each(built)
