"""The builder's messages a user meets on hand-made archives and bad inputs, each triggered for real and
asserted by its text: `conch check` findings, extraction refusals, discover and build errors."""

from __future__ import annotations

import io
import re
import tarfile
from pathlib import Path

import pytest
from hostile_archives import Entry, write_archive
from seed_archives import bert_repo, inception_repo, pack_repo

from conch.archive.extract import safe_extract, scan_archive
from conch.archive.fleet_check import check_archive_models
from conch.builder.archive import add_file, member
from conch.builder.discover import load_module_ensembles, python_files
from conch.builder.pack import resolve
from conch.builder.stamping import stamp_archive, stamped_name
from conch.errors import ArchiveError, BuildError, DeclarationError, PackError

Repo = dict[str, bytes | None]


def edit(repo: Repo, file: str, old: str, new: str) -> Repo:
    data = repo[file]
    assert data is not None and old.encode() in data, (file, old)
    return {**repo, file: data.replace(old.encode(), new.encode())}


def checked(tmp_path: Path, repo: Repo) -> str:
    """The `conch check` lines of ``repo`` packed as hand.tar.gz, one text."""
    return "\n".join(check_archive_models(pack_repo(repo, tmp_path / "hand.tar.gz"))[0].lines())


def entries(repo: Repo) -> list[Entry]:
    """``repo`` as tarball entries, folders before their files."""
    folders = {"/".join(n.split("/")[:i]) for n in repo for i in range(1, n.count("/") + 1)}
    folders |= {n for n, data in repo.items() if data is None}
    out: list[Entry] = [(f"{name}/", "dir", b"") for name in sorted(folders)]
    return out + [(name, "file", data) for name, data in sorted(repo.items()) if data is not None]


# --- conch check findings -------------------------------------------------------------------------------------------

def test_symlink_at_the_root_is_an_error(tmp_path: Path) -> None:
    archive = write_archive(tmp_path / "hand.tar.gz", [*entries(inception_repo()), ("alias", "symlink", "dali")])
    text = "\n".join(check_archive_models(archive)[0].lines())
    assert "hand.tar.gz/alias: error: is a symlink at the archive root; SageMaker only sees real folders as models" \
        in text


def test_many_folders_at_the_root_warn(tmp_path: Path) -> None:
    repo: Repo = {**inception_repo(), **{f"extra{i}": None for i in range(4)}}
    text = checked(tmp_path, repo)
    assert ("hand.tar.gz: warning: 7 folders at the root: past 5, SageMaker's Triton front end warns 'Several "
            "model directories found' (smaller ensembles manage memory better)") in text


def test_fp16_ensemble_output_warns_binary_bodies(tmp_path: Path) -> None:
    repo = inception_repo()
    for file in ("inception_graphdef/config.pbtxt", "ensemble_dali_inception/config.pbtxt"):
        repo = edit(repo, file, "data_type: TYPE_FP32 dims: [ 1001 ]", "data_type: TYPE_FP16 dims: [ 1001 ]")
    report = check_archive_models(pack_repo(repo, tmp_path / "hand.tar.gz"))[0]
    assert report.ok, report.lines()
    text = "\n".join(report.lines())
    assert ("hand.tar.gz/ensemble_dali_inception/config.pbtxt: warning: needs binary bodies: output 'OUTPUT' is "
            "FP16: Triton's JSON bodies cannot carry") in text


def test_config_not_utf8_is_an_error(tmp_path: Path) -> None:
    config = b'name: "dali"\n# caf\xe9\nbackend: "dali"\n'
    with pytest.raises(UnicodeDecodeError) as decoding:
        config.decode("utf-8")
    text = checked(tmp_path, {**inception_repo(), "dali/config.pbtxt": config})
    assert (f"hand.tar.gz/dali/config.pbtxt: error: is not UTF-8 text ({decoding.value}); write the config as "
            "UTF-8") in text


@pytest.mark.parametrize(("old", "new", "expected"), [
    pytest.param('backend: "dali"\n', 'backend: "dali"\n# was platform: "ensemble" once\n',
                 'hand.tar.gz/dali/config.pbtxt: error: is not an ensemble, but its text matches SageMaker\'s '
                 'ensemble regex platform:(\\s)*"ensemble" (in a comment?), so SageMaker may serve it; remove that '
                 'text', id="non-ensemble-whose-comment-matches-the-regex"),
    pytest.param('backend: "dali"\n', 'backend: "dali"\nmodel_transaction_policy { decoupled: true }\n',
                 "hand.tar.gz/dali/config.pbtxt: error: is a decoupled model, which SageMaker's front end refuses "
                 "to serve", id="decoupled-model"),
    pytest.param('backend: "dali"\n', "",
                 "hand.tar.gz/dali/config.pbtxt: error: names no platform or backend, and its first version folder "
                 "holds no model file Triton recognises (model.py, model.onnx, model.pt, model.plan, model.graphdef, "
                 "model.savedmodel), so Triton cannot tell which backend runs it; set backend or platform",
                 id="neither-platform-nor-backend"),
    pytest.param('backend: "dali"', 'backend: "mystery"',
                 "hand.tar.gz/dali/config.pbtxt: warning: conch does not know which model file backend 'mystery' "
                 "needs; not checked", id="unknown-backend-warns-unchecked"),
])
def test_an_edited_dali_config_is_named_in_the_report(tmp_path: Path, old: str, new: str, expected: str) -> None:
    text = checked(tmp_path, edit(inception_repo(), "dali/config.pbtxt", old, new))
    assert expected in text


def test_missing_model_file_is_an_error(tmp_path: Path) -> None:
    repo = {**{k: v for k, v in inception_repo().items() if k != "dali/1/model.dali"}, "dali/1": None}
    text = checked(tmp_path, repo)
    assert "hand.tar.gz/dali/1/: error: lacks model.dali or dali.py, the model file dali loads" in text


def test_missing_label_file_is_an_error(tmp_path: Path) -> None:
    repo = {k: v for k, v in inception_repo().items() if k != "inception_graphdef/inception_labels.txt"}
    text = checked(tmp_path, repo)
    assert ("hand.tar.gz/inception_graphdef/inception_labels.txt: error: is missing: output "
            "'InceptionV3/Predictions/Softmax' names it as its label_filename") in text


def test_environment_path_with_shell_characters_is_an_error(tmp_path: Path) -> None:
    repo = edit(bert_repo(), "preprocess/config.pbtxt", "processing_env.tar.gz", "env;reboot.tar.gz")
    text = checked(tmp_path, repo)
    assert ("hand.tar.gz/preprocess/config.pbtxt: error: EXECUTION_ENV_PATH '$$TRITON_MODEL_DIRECTORY/env;reboot"
            ".tar.gz' holds characters a shell would interpret; Triton runs it through `bash -c`: use ASCII "
            "letters, digits, '_', '.', '-' and '/'") in text


def test_environment_folder_without_activate_is_an_error(tmp_path: Path) -> None:
    repo = edit(bert_repo(), "preprocess/config.pbtxt", "processing_env.tar.gz", "env")
    repo["preprocess/env/bin/python3"] = b""
    text = checked(tmp_path, repo)
    assert ("hand.tar.gz/preprocess/env: error: is an environment folder without bin/activate at its root; Triton "
            "cannot activate it") in text


# --- conch check: the ensemble's wiring -----------------------------------------------------------------------------

ENSEMBLE = "ensemble_dali_inception/config.pbtxt"


def test_ensemble_without_steps_is_an_error(tmp_path: Path) -> None:
    data = inception_repo()[ENSEMBLE]
    assert data is not None
    head = data.split(b"ensemble_scheduling")[0]
    text = checked(tmp_path, {**inception_repo(), ENSEMBLE: head})
    assert ("hand.tar.gz/ensemble_dali_inception/config.pbtxt: error: is an ensemble without ensemble_scheduling; add "
            "its steps (ensemble_scheduling { step [...] })") in text


def test_step_reading_an_unknown_tensor_is_an_error(tmp_path: Path) -> None:
    repo = edit(inception_repo(), ENSEMBLE, 'key: "input" value: "preprocessed_image"',
                'key: "input" value: "preprocesed_image"')
    text = checked(tmp_path, repo)
    assert ("hand.tar.gz/ensemble_dali_inception/config.pbtxt: error: tensor 'preprocesed_image' is read by step(s) 1 "
            "but is neither an ensemble input nor written by any step; write it or read another") in text


def test_map_key_the_model_lacks_is_an_error(tmp_path: Path) -> None:
    repo = edit(inception_repo(), ENSEMBLE, 'key: "DALI_INPUT_0"', 'key: "DALI_INPUT_1"')
    text = checked(tmp_path, repo)
    assert ("hand.tar.gz/ensemble_dali_inception/config.pbtxt: error: step 'dali': input_map key 'DALI_INPUT_1' "
            "is not an input of that model (its inputs: DALI_INPUT_0)") in text


def test_shape_mismatch_between_steps_is_an_error(tmp_path: Path) -> None:
    repo = edit(inception_repo(), "inception_graphdef/config.pbtxt", "dims: [ 299, 299, 3 ]", "dims: [ 224, 224, 3 ]")
    text = checked(tmp_path, repo)
    assert ("hand.tar.gz/ensemble_dali_inception/config.pbtxt: error: step 'inception_graphdef' input 'input' has "
            "shape [-1, 224, 224, 3] but output 'DALI_OUTPUT_0' of step 'dali' has shape [-1, 299, 299, 3] (batch "
            "included; -1 matches any size; tensor 'preprocessed_image'); make them agree") in text


# --- safe extraction: refusals of hand-made tarballs ----------------------------------------------------------------

CONFIG: Entry = ("m/config.pbtxt", "file", b'name: "m"\nplatform: "ensemble"\n')


def refused(tmp_path: Path, listed: list[Entry], match: str) -> None:
    archive = write_archive(tmp_path / "hostile.tar.gz", listed)
    dest = tmp_path / "stage" / "hostile"
    with pytest.raises(ArchiveError, match=match):
        safe_extract(archive, dest)
    assert not dest.exists(), "a refused archive must leave nothing behind"


def test_root_entry_that_is_a_file_is_refused(tmp_path: Path) -> None:
    refused(tmp_path, [("./", "file", b"not a folder"), CONFIG],
            r"hostile\.tar\.gz: entry '\./' " + re.escape("would replace the archive root; refusing to unpack it"))


def test_fifo_entry_is_refused_naming_what_an_archive_holds(tmp_path: Path) -> None:
    refused(tmp_path, [CONFIG, ("m/1/pipe", "fifo", b"")],
            re.escape("entry 'm/1/pipe' is a FIFO; an MME archive holds only folders, files and symlinks; refusing "
                      "to unpack it"))


def test_entry_under_a_file_is_refused(tmp_path: Path) -> None:
    refused(tmp_path, [("m", "file", b"a file"), CONFIG],
            re.escape("entry 'm/config.pbtxt' lies under 'm', which the archive wrote as a file; refusing to unpack "
                      "it"))


def test_file_replacing_a_folder_is_refused(tmp_path: Path) -> None:
    refused(tmp_path, [CONFIG, ("m/1/", "dir", b""), ("m/1", "file", b"a file")],
            re.escape("entry 'm/1' would replace a folder of the same name; refusing to unpack it"))


def test_scan_refuses_an_archive_past_its_entry_limit(tmp_path: Path) -> None:
    archive = write_archive(tmp_path / "many.tar.gz", [CONFIG, ("m/1/", "dir", b""), ("m/1/a", "file", b"a")])
    with archive.open("rb") as stream, pytest.raises(ArchiveError, match=re.escape(
            "archive many: entry 'm/1/a' is past the limit of 2 entries (a possible archive bomb); refusing to "
            "unpack it")):
        scan_archive(stream, "many", lambda name: True, max_entries=2)


def test_scan_refuses_an_archive_past_its_unpacked_size(tmp_path: Path) -> None:
    archive = write_archive(tmp_path / "big.tar.gz", [CONFIG, ("m/1/model.onnx", "file", bytes(4096))])
    with archive.open("rb") as stream, pytest.raises(ArchiveError, match=re.escape(
            "archive big: entry 'm/1/model.onnx' takes the unpacked size past 1000 bytes (a possible gzip bomb); "
            "refusing to unpack it")):
        scan_archive(stream, "big", lambda name: True, max_bytes=1000)


# --- discovering ensemble files -------------------------------------------------------------------------------------

def test_missing_path_is_refused(tmp_path: Path) -> None:
    with pytest.raises(BuildError, match=re.escape(f"{tmp_path / 'pipelines.py'}: no such file or folder; give "
                                                   "ensemble .py files or folders of them")):
        python_files([tmp_path / "pipelines.py"])


def test_file_failing_on_import_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "msgA_broken_ensembles.py"
    path.write_text("import math\nRATIO = 1 / 0\n")
    with pytest.raises(DeclarationError, match=re.escape("msgA_broken_ensembles.py line 2: ZeroDivisionError: "
                                                         "division by zero; fix the file")):
        load_module_ensembles(path)


# --- writing, stamping and packing archives -------------------------------------------------------------------------

def test_file_shrinking_while_archived_is_refused(tmp_path: Path) -> None:
    """The file is measured for its tar header, then cut short (another process rewriting it) before it is read."""
    model = tmp_path / "model.onnx"
    model.write_bytes(b"w" * 4096)
    info = member("m/1/model.onnx", tarfile.REGTYPE, 0o644, model.stat().st_size)
    model.write_bytes(b"w" * 100)
    with tarfile.open(fileobj=io.BytesIO(), mode="w") as tar, pytest.raises(
            BuildError, match=re.escape(f"file {model} shrank while it was archived; build again")):
        add_file(tar, info, model)


def test_stamping_onto_a_folder_the_archive_already_holds_is_refused(tmp_path: Path) -> None:
    taken = stamped_name("preprocess", "bert-2.tar.gz")
    archive = pack_repo({**bert_repo(), f"{taken}/notes.txt": b"left here by hand\n"}, tmp_path / "bert.tar.gz")
    assert check_archive_models(archive)[0].ok
    with pytest.raises(ArchiveError, match=re.escape(
            f"bert.tar.gz: cannot rename step 'preprocess' to '{taken}', the archive already holds a folder of that "
            "name; rename that folder and rebuild")):
        stamp_archive(archive, "bert-2", tmp_path / "out")
    assert not (tmp_path / "out" / "bert-2.tar.gz").exists()


def test_requirement_no_release_satisfies_is_refused_with_pips_words(local_index: str) -> None:
    """The index holds conch-fixture-wheel 1.0 only: pip cannot resolve 2.0 (not a "no release at all" case)."""
    fixed = re.escape("pip could not resolve conch-fixture-wheel==2.0 for CPython 3.10 on Linux x86-64:\n")
    with pytest.raises(PackError, match=f"(?s){fixed}.*No matching distribution found for conch-fixture-wheel"):
        resolve(("conch-fixture-wheel==2.0",), "3.10", refresh=True)
