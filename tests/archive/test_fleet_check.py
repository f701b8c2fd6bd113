"""The fleet check: archives together as one endpoint serves them (shared step names, a TargetModel given twice,
mixed releases, archives the front end cannot serve), read from their streams without unpacking them."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import linear_ensemble
from hostile_archives import write_archive
from seed_archives import bert_repo, inception_repo, pack_repo

from conch.archive.extract import scan_archive
from conch.archive.fleet_check import ArchiveModels, archive_models, check_archive_models, check_fleet
from conch.builder.repository_build import build_ensemble
from conch.builder.stamping import stamp_archives
from conch.errors import ArchiveError


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_ensemble(linear_ensemble("fleetchk"), tmp_path_factory.mktemp("built"), "local")


def copy(archive: Path, dest: Path) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(archive.read_bytes())
    return dest


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "conch.cli", *args], capture_output=True, text=True, timeout=120)


def test_two_copies_of_one_archive_collide_and_stamped_copies_do_not(built: Path, tmp_path: Path) -> None:
    a, b = copy(built, tmp_path / "a.tar.gz"), copy(built, tmp_path / "b.tar.gz")
    report = check_fleet([archive_models(a), archive_models(b)])
    (finding,) = report.errors
    assert finding.kind == "shared-step-names" and finding.archives == ("a.tar.gz", "b.tar.gz")
    assert finding.models == ("fleetchk__add_one", "fleetchk__double")
    assert "a.tar.gz, b.tar.gz both hold step models fleetchk__add_one, fleetchk__double" in finding.message
    assert "`conch stamp ARCHIVE --as NAME`" in finding.message and "`conch deploy`" in finding.message
    stamped = [s.archive for s in stamp_archives(built, ["a", "b"], tmp_path / "stamped")]
    together = check_fleet([archive_models(p) for p in [built, *stamped]])
    assert together.ok and together.lines() == ["fleet: ok: 3 archives can share one endpoint"]


def test_a_target_model_twice_and_mixed_releases_are_errors(built: Path, tmp_path: Path) -> None:
    models = archive_models(built)
    older = replace(models, target_model="older.tar.gz", models=frozenset(), steps=frozenset(), release="23.05")
    report = check_fleet([models, models, older])
    kinds = {f.kind: f.message for f in report.errors}
    assert "TargetModel fleetchk.tar.gz is given 2 times" in kinds["duplicate-target-model"]
    assert "different Triton releases (23.05: older.tar.gz; 24.10: fleetchk.tar.gz, fleetchk.tar.gz)" in kinds[
        "releases"]
    assert "shared-step-names" not in kinds  # one TargetModel twice is not two archives sharing names


def test_archives_the_front_end_cannot_serve_are_named(tmp_path: Path) -> None:
    none = bert_repo()
    none["ensemble/config.pbtxt"] = none["ensemble/config.pbtxt"].replace(  # type: ignore[union-attr]
        b'platform: "ensemble"', b'platform:"ensemble" ')
    two = {**inception_repo(), **{k.replace("ensemble/", "ensemble2/"): v for k, v in bert_repo().items()
                                  if k.startswith("ensemble/")}}
    two["ensemble2/config.pbtxt"] = two["ensemble2/config.pbtxt"].replace(b'"ensemble"\nplatform',  # type: ignore
                                                                          b'"ensemble2"\nplatform')
    unreadable = tmp_path / "broken.tar.gz"
    unreadable.write_bytes(b"\x1f\x8b not really")
    report = check_fleet([archive_models(pack_repo(none, tmp_path / "none.tar.gz")),
                          archive_models(pack_repo(two, tmp_path / "two.tar.gz")), archive_models(unreadable)])
    kinds = {f.kind: f.message for f in report.errors}
    assert kinds["several-ensembles"].startswith("two.tar.gz holds 2 ensembles (ensemble2, ensemble_dali_inception)")
    assert kinds["unreadable"].startswith("archive broken.tar.gz is not a readable .tar.gz")
    assert "no-ensemble" not in kinds  # `platform:"ensemble"` still matches the front end's regex
    assert check_fleet([ArchiveModels("empty.tar.gz")]).errors[0].kind == "no-ensemble"


def test_the_summary_that_travels_in_s3_metadata_round_trips(built: Path) -> None:
    models = archive_models(built)
    assert models.ensembles == ("fleetchk",) and models.release == "24.10" and models.stamped_for is None
    assert models.steps == models.models == {"fleetchk__add_one", "fleetchk__double"}
    assert ArchiveModels.from_summary("fleetchk.tar.gz", models.summary()) == models
    assert ArchiveModels.from_summary("x", '{"v": 2}') is None and ArchiveModels.from_summary("x", "no") is None


def test_conch_checks_unpacking_gives_what_the_stream_gives(built: Path, tmp_path: Path) -> None:
    """`conch check` of local archives takes the fleet check's view from its own unpacking: the same as reading
    the archive's stream, for a plain and a stamped archive; nothing for an archive that fails the check."""
    (stamped,) = stamp_archives(built, ["v2"], tmp_path / "stamped")
    for archive in (built, stamped.archive):
        report, models = check_archive_models(archive)
        assert report.ok and models == archive_models(archive)
    assert archive_models(stamped.archive).stamped_for == "v2.tar.gz"
    none = bert_repo()
    none["ensemble/config.pbtxt"] = none["ensemble/config.pbtxt"].replace(  # type: ignore[union-attr]
        b'platform: "ensemble"', b'platform: "python"')
    report, models = check_archive_models(pack_repo(none, tmp_path / "none.tar.gz"))
    assert models is None and "no model folder holds an ensemble config" in report.summary()
    broken = tmp_path / "broken.tar.gz"
    broken.write_bytes(b"\x1f\x8b not really")
    report, models = check_archive_models(broken)
    assert models is None and report.summary().startswith("broken.tar.gz fails `conch check`: archive: ")


def test_the_scan_reads_only_what_it_wants_and_refuses_unsafe_entries(built: Path, tmp_path: Path) -> None:
    found = scan_archive(io.BytesIO(built.read_bytes()), "x", lambda p: p.endswith("config.pbtxt"))
    assert sorted(found) == ["fleetchk/config.pbtxt", "fleetchk__add_one/config.pbtxt",
                             "fleetchk__double/config.pbtxt"]
    evil = write_archive(tmp_path / "evil.tar.gz", [("m/config.pbtxt", "file", "name: 'm'"),
                                                    ("../escape", "file", "x")])
    with pytest.raises(ArchiveError, match=r"entry '../escape' has a '..' component"):
        scan_archive(evil.open("rb"), "evil.tar.gz", lambda p: True)
    fifo = write_archive(tmp_path / "fifo.tar.gz", [("m/pipe", "fifo", "")])
    with pytest.raises(ArchiveError, match=r"entry 'm/pipe' is not a folder, file or link"):
        scan_archive(fifo.open("rb"), "fifo.tar.gz", lambda p: True)
    big = write_archive(tmp_path / "big.tar.gz", [("m/config.pbtxt", "file", b"x" * 4096)])
    with pytest.raises(ArchiveError, match=r"takes the unpacked size past 1000 bytes"):
        scan_archive(big.open("rb"), "big.tar.gz", lambda p: True, max_bytes=1000)


def test_conch_check_of_two_copies_exits_one_naming_the_collision(built: Path, tmp_path: Path) -> None:
    a, b = copy(built, tmp_path / "a.tar.gz"), copy(built, tmp_path / "b.tar.gz")
    result = cli("check", str(a), str(b))
    assert result.returncode == 1, result.stderr
    assert "a.tar.gz: ok" in result.stdout and "b.tar.gz: ok" in result.stdout
    assert ("conch: error: fleet: a.tar.gz, b.tar.gz both hold step models fleetchk__add_one, fleetchk__double"
            in result.stderr)
    doc = json.loads(cli("check", str(tmp_path), "--json", "--quiet").stdout)
    assert doc["ok"] is False and [a["ok"] for a in doc["archives"]] == [True, True]
    assert doc["fleet"]["findings"][0]["kind"] == "shared-step-names"
    assert doc["fleet"]["findings"][0]["archives"] == ["a.tar.gz", "b.tar.gz"]
    stamped = tmp_path / "stamped"
    assert cli("stamp", str(a), "--as", "a", "--as", "b", "--out", str(stamped)).returncode == 0
    ok = cli("check", str(stamped))
    assert ok.returncode == 0 and "fleet: ok: 2 archives can share one endpoint" in ok.stdout
