"""`conch check` on conch-built archives (both targets), hand-made ones laid out as in seed 002, and one
bad archive per rule: each fails with its finding, naming the file it is in."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import EXAMPLE_FILES, ExampleArchives, linear_ensemble
from hostile_archives import write_archive
from seed_archives import bert_repo, inception_repo, pack_repo

from conch import BuildError
from conch.archive.check_report import CheckReport
from conch.archive.fleet_check import check_archive_models
from conch.builder.repository_build import build_ensemble


def check_repo(tmp_path: Path, repo: dict[str, bytes | None], name: str = "hand.tar.gz") -> CheckReport:
    return check_archive_models(pack_repo(repo, tmp_path / name))[0]


def edit(repo: dict[str, bytes | None], file: str, old: str, new: str) -> dict[str, bytes | None]:
    data = repo[file]
    assert data is not None and old.encode() in data, (file, old)
    return {**repo, file: data.replace(old.encode(), new.encode())}


def only_error(report: CheckReport) -> str:
    assert not report.ok
    return "\n".join(report.lines())


@pytest.mark.parametrize("target", ["production", "local"])
def test_conch_built_archives_pass(tmp_path: Path, target: str) -> None:
    archive = build_ensemble(linear_ensemble("chk"), tmp_path, target)
    report = check_archive_models(archive)[0]
    assert report.ok, report.lines()
    assert report.lines() == ["chk.tar.gz: ok: ensemble 'chk', 3 model folders"]


# Checking text_embeddings' packed environment (the release's Python compiles and imports it) takes over 30 s on
# a 2-core machine, for either target: both run with -m slow. The local target packs production's bytes
# (builder/test_pack.py proves it in the default run), and every other example is checked here.
EVERY_EXAMPLE = [pytest.param(f, t, marks=[pytest.mark.slow] if f == "text_embeddings.py" else [])
                 for f in EXAMPLE_FILES for t in ("production", "local")]


@pytest.mark.parametrize(("file", "target"), EVERY_EXAMPLE)
def test_every_example_archive_passes(file: str, target: str, examples: ExampleArchives) -> None:
    """README: every example passes `conch check` (archives built once per session, shared with test_run)."""
    try:
        archive = examples.archive(file, target)
    except BuildError as exc:  # a TensorRT plan is compiled on a GPU host only
        assert (file, target) == ("resnet_tensorrt.py", "production"), exc
        assert "needs an NVIDIA GPU" in str(exc), exc
        return
    report = check_archive_models(archive)[0]
    assert report.ok, report.lines()


@pytest.mark.parametrize("repo", [bert_repo(), inception_repo()], ids=["bert-trt-python", "dali-inception"])
def test_hand_made_seed_002_archives_pass(tmp_path: Path, repo: dict[str, bytes | None]) -> None:
    report = check_repo(tmp_path, repo)
    assert report.ok, report.lines()
    assert report.ensemble in ("ensemble", "ensemble_dali_inception")


def test_label_file_with_a_line_short_fails(tmp_path: Path) -> None:
    text = only_error(check_repo(tmp_path, inception_repo(labels=1000)))
    assert ("hand.tar.gz/inception_graphdef/inception_labels.txt: error: has 1000 labels, but output "
            "'InceptionV3/Predictions/Softmax' has 1001 classes") in text


@pytest.mark.parametrize("name", ["../../../../../../etc/hostname", "/etc/hostname"])
def test_label_file_outside_the_model_folder_is_refused_unread(tmp_path: Path, name: str) -> None:
    repo = edit(inception_repo(), "inception_graphdef/config.pbtxt", '"inception_labels.txt"', f'"{name}"')
    text = only_error(check_repo(tmp_path, repo))
    assert (f"hand.tar.gz/inception_graphdef/config.pbtxt: error: output 'InceptionV3/Predictions/Softmax': "
            f"label_filename '{name}' points outside the model folder") in text
    assert "labels, but output" not in text


BAD = {
    "no ensemble": (lambda r: edit(r, "ensemble/config.pbtxt", 'platform: "ensemble"', 'platform: "ensemble2"'),
                    "no model folder holds an ensemble config"),
    "ensemble text not matching the regex": (
        lambda r: edit(r, "ensemble/config.pbtxt", 'platform: "ensemble"', 'platform :"ensemble"'),
        'ensemble/config.pbtxt: error: is an ensemble, but SageMaker\'s front end only finds one'),
    "two ensembles": (lambda r: {**r, "ensemble2/1": None, "ensemble2/config.pbtxt": edit(
        r, "ensemble/config.pbtxt", 'name: "ensemble"', 'name: "ensemble2"')["ensemble/config.pbtxt"]},
        "2 ensembles (ensemble, ensemble2)"),
    "name differs from folder": (lambda r: edit(r, "bert-trt/config.pbtxt", 'name: "bert-trt"', 'name: "bert"'),
                                 "bert-trt/config.pbtxt: error: names model 'bert', but its folder is 'bert-trt'"),
    "config does not parse": (lambda r: edit(r, "postprocess/config.pbtxt", "max_batch_size: 0", "max_batch: 0"),
                              "postprocess/config.pbtxt: error: does not parse as Triton's ModelConfig"),
    "ensemble without 1/": (lambda r: {k: v for k, v in r.items() if k != "ensemble/1"},
                            "ensemble/: error: has no version folder Triton loads under its version_policy"),
    "model file missing": (lambda r: {**{k: v for k, v in r.items() if k != "bert-trt/1/model.plan"},
                                      "bert-trt/1": None},
                           "bert-trt/1/: error: lacks model.plan"),
    "input not mapped": (lambda r: edit(r, "ensemble/config.pbtxt", 'input_map { key: "input_ids" value: "input_ids" }',
                                        ""), "step 1 (bert-trt) has no input_map"),
    "dtype mismatch": (lambda r: edit(r, "bert-trt/config.pbtxt", "TYPE_INT32", "TYPE_INT64"),
                       "step 'bert-trt' input 'input_ids' is TYPE_INT64 but output 'input_ids' of step 'preprocess' "
                       "is TYPE_INT32 (tensor 'input_ids')"),
    "dims mismatch": (lambda r: edit(r, "postprocess/config.pbtxt", "-1, 128, 384", "-1, 128, 768"),
                      "step 'postprocess' input 'last_hidden_state' has shape [-1, 128, 768] but"),
    "ensemble output left unwritten": (
        lambda r: edit(r, "ensemble/config.pbtxt", 'value: "SENT_EMBED"', 'value: "INPUT0"'),
        "ensemble output 'SENT_EMBED' is written by no step's output_map"),
    "version policy names a missing version": (
        lambda r: edit(r, "bert-trt/config.pbtxt", "max_batch_size: 0", "max_batch_size: 0\n"
                       "version_policy: { specific: { versions: [ 2 ] } }"),
        "bert-trt/: error: has no version folder Triton loads under its version_policy (Triton: 'at least one "
        "version must be available under the version policy'); found 1"),
    "env path without the model-directory prefix": (
        lambda r: edit(r, "preprocess/config.pbtxt", "$$TRITON_MODEL_DIRECTORY/", "/opt/"),
        "EXECUTION_ENV_PATH '/opt/processing_env.tar.gz' must start with $$TRITON_MODEL_DIRECTORY/"),
    "env path leaving the archive": (
        lambda r: edit(r, "preprocess/config.pbtxt", "processing_env", "../../processing_env"),
        "points outside the archive"),
    "env file missing": (lambda r: {k: v for k, v in r.items() if k != "postprocess/processing_env.tar.gz"},
                         "postprocess/processing_env.tar.gz: error: is missing: postprocess's EXECUTION_ENV_PATH"),
    "env as .tar.xz": (lambda r: {**edit(r, "preprocess/config.pbtxt", ".tar.gz", ".tar.xz"),
                                  "preprocess/processing_env.tar.xz": b"xz"},
                       "preprocess/processing_env.tar.xz: error: is not a .tar.gz or .tar"),
    "shell metacharacters in a folder name": (
        lambda r: {k.replace("bert-trt", "bert$(id)"): v for k, v in edit(
            edit(r, "bert-trt/config.pbtxt", '"bert-trt"', '"bert$(id)"'), "ensemble/config.pbtxt", '"bert-trt"',
            '"bert$(id)"').items()},
        "bert$(id)/: error: model folder 'bert$(id)' is not a safe name"),
    "non-ASCII folder name": (
        lambda r: {k.replace("preprocess", "préprocess"): v for k, v in edit(
            edit(r, "preprocess/config.pbtxt", '"preprocess"', '"préprocess"'), "ensemble/config.pbtxt",
            '"preprocess"', '"préprocess"').items()},
        "model folder 'préprocess' is not a safe name"),
    "config.pbtxt at the root": (lambda r: {**r, "config.pbtxt": b'name: "x"'},
                                 "makes SageMaker load the archive as one model"),
    "instance_group on the ensemble": (
        lambda r: edit(r, "ensemble/config.pbtxt", "max_batch_size: 0", "max_batch_size: 0\n"
                       "instance_group [ { kind: KIND_CPU } ]"),
        "ensemble/config.pbtxt: error: sets instance_group, which Triton refuses on an ensemble"),
}


def test_a_non_batching_step_in_a_batching_ensemble_passes(tmp_path: Path) -> None:
    """Triton loads it when the shapes agree with the batch dimension added (load_rule_cases.py's
    non_batching_step_in_batching_ensemble, confirmed on tritonserver 2.51); conch once refused it."""
    report = check_repo(tmp_path, edit(bert_repo(), "ensemble/config.pbtxt", "max_batch_size: 0", "max_batch_size: 4"))
    assert report.ok, report.lines()


@pytest.mark.parametrize("case", sorted(BAD))
def test_each_bad_layout_fails_with_its_finding(tmp_path: Path, case: str) -> None:
    change, finding = BAD[case]
    text = only_error(check_repo(tmp_path, change(bert_repo())))
    assert finding in text


def test_unsafe_archive_fails_with_the_extraction_refusal(tmp_path: Path) -> None:
    archive = write_archive(tmp_path / "evil.tar.gz", [("m/1/model.py", "symlink", "/etc/passwd")])
    text = only_error(check_archive_models(archive)[0])
    assert "evil.tar.gz: error: archive" in text and "entry 'm/1/model.py' is a symlink to the absolute path" in text


def test_more_than_five_model_folders_warns_but_passes(tmp_path: Path) -> None:
    repo = bert_repo()
    for i in range(3):
        repo[f"extra{i}/notes.txt"] = b"not a model"
    report = check_repo(tmp_path, repo)
    assert report.ok
    assert any("past 5, SageMaker's Triton front end warns" in line for line in report.lines())


def test_a_config_conch_cannot_declare_is_checked_as_triton_reads_it(tmp_path: Path) -> None:
    """The check reads each config through the typed reader, which refuses nothing Triton accepts: a backend
    conch has no step for, a tensor name conch would not declare and a data type conch has no dtype for (BF16,
    carried as Triton's message) are checked like any other."""
    repo = edit(bert_repo(), "bert-trt/config.pbtxt", 'platform: "tensorrt_plan"', 'backend: "openvino"')
    repo = edit(repo, "bert-trt/config.pbtxt", 'name: "input_ids" data_type: TYPE_INT32',
                'name: "input ids" data_type: TYPE_BF16')
    repo = edit(repo, "ensemble/config.pbtxt", 'input_map { key: "input_ids"', 'input_map { key: "input ids"')
    assert only_error(check_repo(tmp_path, repo)).splitlines() == [
        "hand.tar.gz/ensemble/config.pbtxt: error: step 'bert-trt' input 'input ids' is TYPE_BF16 but output "
        "'input_ids' of step 'preprocess' is TYPE_INT32 (tensor 'input_ids'); make the data types equal",
        "hand.tar.gz/bert-trt/config.pbtxt: warning: conch does not know which model file backend 'openvino' "
        "needs; not checked"]
    for file in ("ensemble/config.pbtxt", "preprocess/config.pbtxt"):
        repo = edit(repo, file, 'name: "INPUT0" data_type: TYPE_STRING', 'name: "INPUT0" data_type: TYPE_BF16')
    repo = edit(repo, "preprocess/config.pbtxt", "TYPE_INT32", "TYPE_BF16")
    report = check_repo(tmp_path, repo, "bf16.tar.gz")
    assert report.ok, report.lines()
    assert any(line.startswith("bf16.tar.gz/ensemble/config.pbtxt: warning: needs binary bodies: input 'INPUT0' is "
                               "BF16: Triton's JSON bodies cannot carry FP16 or BF16") for line in report.lines())


@pytest.mark.parametrize("policy", ["all: {}", "latest: { num_versions: 2 }", "specific: { versions: [ 1 ] }"])
def test_a_version_policy_conch_declares_is_read_typed_and_serves_version_1(tmp_path: Path, policy: str) -> None:
    """The typed reader types these policies (others are carried): either way the check finds version 1."""
    repo = edit(bert_repo(), "bert-trt/config.pbtxt", "max_batch_size: 0",
                f"max_batch_size: 0\nversion_policy: {{ {policy} }}")
    repo = {**{k: v for k, v in repo.items() if k != "bert-trt/1/model.plan"}, "bert-trt/1": None}
    assert only_error(check_repo(tmp_path, repo)).splitlines() == [
        "hand.tar.gz/bert-trt/1/: error: lacks model.plan, the model file tensorrt_plan loads"]


def test_a_pytorch_model_needs_model_pt_unless_its_runtime_is_model_py(tmp_path: Path) -> None:
    """libtorch (pytorch_backend src/libtorch.cc r24.10) loads model.pt alone; with runtime "model.py" the
    Python runtime (src/model.py) loads model.py or model.pt. conch took model.py for libtorch too. A config
    naming backend "pytorch" alone is given platform pytorch_libtorch (core AutoCompleteBackendFields r24.10):
    conch called it a refused platform/backend pair."""
    repo = edit(bert_repo(), "bert-trt/config.pbtxt", 'platform: "tensorrt_plan"', 'backend: "pytorch"')
    repo = {**{k: v for k, v in repo.items() if k != "bert-trt/1/model.plan"}, "bert-trt/1/model.py": b"# a model"}
    assert only_error(check_repo(tmp_path, repo)).splitlines() == [
        "hand.tar.gz/bert-trt/1/: error: lacks model.pt, the model file pytorch loads"]
    repo = edit(repo, "bert-trt/config.pbtxt", 'backend: "pytorch"', 'backend: "pytorch"\nruntime: "model.py"')
    assert check_repo(tmp_path, repo, "runtime.tar.gz").ok
