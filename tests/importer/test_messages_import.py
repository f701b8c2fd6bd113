"""`conch import` refusals: what is not an ensemble repository, outputs that would collide, a copy in the
way, --strict; each triggered for real, its message asserted."""

from __future__ import annotations

import re
from pathlib import Path

import handmade
import pytest
from seed_archives import bert_repo, pack_repo
from single_models import AUTO_SUM_MODEL, write_repo

from conch.cli import main
from conch.errors import BuildError
from conch.importer.convert import import_sources


def test_a_source_that_does_not_exist(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nowhere"
    assert main(["import", str(missing), "--out", str(tmp_path / "out")]) != 0
    assert (f"{missing}: no such folder or archive; give a model repository folder or an MME .tar.gz"
            in capsys.readouterr().err)


def test_a_repository_without_an_ensemble(tmp_path: Path) -> None:
    repo = handmade.write(tmp_path / "repo")
    (repo / "shop/config.pbtxt").unlink()
    with pytest.raises(BuildError, match=re.escape(
            f"{repo}: no model folder holds an ensemble config (platform: \"ensemble\"); conch import reads an "
            "ensemble and its steps")):
        import_sources([repo], tmp_path / "out", samples=False)


def test_one_out_file_for_two_ensembles(tmp_path: Path) -> None:
    one, two = handmade.write(tmp_path / "one"), handmade.write(tmp_path / "two")
    out = tmp_path / "out" / "shop.py"
    with pytest.raises(BuildError, match=re.escape(
            f"{out}: the sources hold 2 ensembles; give --out a folder to write one module per ensemble")):
        import_sources([one, two], out, samples=False)
    assert not out.exists()


def test_two_ensembles_of_the_same_name_into_one_folder(tmp_path: Path) -> None:
    one, two = handmade.write(tmp_path / "one"), handmade.write(tmp_path / "two")
    with pytest.raises(BuildError, match=re.escape(
            "the sources hold more than one ensemble written as shop.py; import them into different --out "
            "folders")):
        import_sources([one, two], tmp_path / "out", samples=False)
    assert list((tmp_path / "out").iterdir()) == []


def test_copy_files_refuses_to_overwrite_an_earlier_copy(tmp_path: Path) -> None:
    repo = handmade.write(tmp_path / "repo")
    out = tmp_path / "out"
    (out / "repo").mkdir(parents=True)
    with pytest.raises(BuildError, match=re.escape(
            f"{repo}: {out / 'repo'} exists already; remove it or give another --out")):
        import_sources([repo], out, copy_files=True, samples=False)


def test_strict_lists_what_the_import_cannot_say(tmp_path: Path) -> None:
    repo = handmade.write(tmp_path / "repo")
    (repo / "scale/config.pbtxt").write_text(handmade.SCALE.replace('name: "scale"\n', ""))
    with pytest.raises(BuildError, match=re.escape(
            "--strict: the import cannot say everything the sources hold: scale/config.pbtxt: name: not given")):
        import_sources([repo], tmp_path / "out", strict=True, samples=False)
    assert list((tmp_path / "out").iterdir()) == []


def test_an_existing_module_is_not_replaced_and_nothing_is_unpacked(tmp_path: Path) -> None:
    archive = pack_repo(bert_repo(), tmp_path / "hand.tar.gz")
    out = tmp_path / "out"
    out.mkdir()
    (out / "ensemble.py").write_text("# written by hand\n")
    with pytest.raises(BuildError, match=r"out/ensemble.py exists already \(a module of yours, or an earlier "
                       r"import\); conch import does not replace it: remove it or give another --out"):
        import_sources([archive], out, samples=False)
    assert (out / "ensemble.py").read_text() == "# written by hand\n"
    assert sorted(p.name for p in out.iterdir()) == ["ensemble.py"]


def test_a_model_whose_auto_complete_fails_is_refused_as_triton_refuses_it(tmp_path: Path) -> None:
    broken = AUTO_SUM_MODEL.replace(b"config.set_max_batch_size(4)", b"raise RuntimeError('no config today')")
    folder = write_repo({"auto_sum/1/model.py": broken}, tmp_path / "repo")
    with pytest.raises(BuildError, match=r"auto_sum/1/model.py: auto_complete_config fails on Python 3\.\d+, so Triton "
                       r"refuses to load 'auto_sum' \(there is no config.pbtxt to load instead\): RuntimeError: no "
                       r"config today"):
        import_sources([folder], tmp_path / "out", samples=False)
