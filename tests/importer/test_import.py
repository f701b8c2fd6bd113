"""`conch import`: hand-made repositories and archives become declarations that build back into the same
archive; what cannot be declared is named (an error with --strict); archives are unpacked safely."""

from __future__ import annotations

import sys
from pathlib import Path

import handmade
import pytest
from hostile_archives import write_archive
from same_archive import assert_same, contents
from seed_archives import bert_repo, pack_repo

from conch.archive.fleet_check import check_archive_models
from conch.builder.discover import load_module_ensembles
from conch.builder.repository_build import build_ensemble
from conch.cli import main
from conch.errors import ArchiveError, BuildError
from conch.importer.convert import import_sources


def build_module(module: Path, out: Path, target: str = "production") -> Path:
    """What `conch build MODULE` does, without keeping the module imported (tests reuse file names)."""
    try:
        (ensemble,) = load_module_ensembles(module)
        return build_ensemble(ensemble, out, target)
    finally:
        sys.modules.pop(module.stem, None)


def test_a_seed_002_archive_round_trips(tmp_path: Path) -> None:
    archive = pack_repo(bert_repo(), tmp_path / "hand.tar.gz")
    (imported,) = import_sources([archive], tmp_path / "out", samples=False)
    assert imported.messages == []
    assert (imported.configs_equal, imported.files_identical) == (4, 5)
    text = imported.module.read_text()
    assert 'step_prefix=""' in text and "PythonModelStep(" in text and 'plan=MODELS / "bert-trt/1/model.plan"' in text
    rebuilt = build_module(imported.module, tmp_path / "built")
    assert assert_same(archive, rebuilt) == 9  # 4 configs, 2 model.py, 2 environments, the plan
    assert check_archive_models(rebuilt)[0].ok


def _bert_folder(root: Path, edit: tuple[str, str, str] | None = None) -> Path:
    for name, data in bert_repo().items():
        path = root / name
        if data is None:
            path.mkdir(parents=True, exist_ok=True)
            continue
        if edit is not None and name == edit[0]:
            data = data.replace(edit[1].encode(), edit[2].encode())
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root


FORMAT = ("preprocess/config.pbtxt", '{ name: "INPUT0" data_type: TYPE_STRING',
          '{ name: "INPUT0" format: FORMAT_NHWC data_type: TYPE_STRING')


def test_what_cannot_be_declared_is_named_by_file_and_field(tmp_path: Path) -> None:
    repo = _bert_folder(tmp_path / "repo", FORMAT)
    (tmp_path / "repo/bert-trt/1/notes.txt").write_text("kept by hand")
    (imported,) = import_sources([repo], tmp_path / "out" / "bert.py", samples=False)
    assert "preprocess/config.pbtxt: input 'INPUT0': field 'format' has no conch setting" in imported.messages
    assert ("bert-trt/1/notes.txt: not kept: a tensorrt_plan step lays out 1/model.plan, its label files and "
            "warmup/ only") in imported.messages
    assert imported.module.is_file()


def test_strict_makes_it_an_error_and_keeps_no_module(tmp_path: Path) -> None:
    repo = _bert_folder(tmp_path / "repo", FORMAT)
    with pytest.raises(BuildError, match="--strict: .*preprocess/config.pbtxt: input 'INPUT0': field 'format'"):
        import_sources([repo], tmp_path / "out", strict=True, copy_files=True, samples=False)
    assert list((tmp_path / "out").iterdir()) == []
    assert (repo / "preprocess/config.pbtxt").is_file()


def test_a_backend_without_a_conch_step_is_named(tmp_path: Path) -> None:
    repo = _bert_folder(tmp_path / "repo", ("bert-trt/config.pbtxt", 'platform: "tensorrt_plan"',
                                            'backend: "openvino"'))
    (imported,) = import_sources([repo], tmp_path / "out", samples=False)
    assert "bert-trt/config.pbtxt: backend 'openvino' has no conch step" in " ".join(imported.messages)


def test_an_unsafe_archive_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    archive = write_archive(tmp_path / "evil.tar.gz", [("../escape.txt", "file", b"x")])
    with pytest.raises(ArchiveError, match="escape.txt"):
        import_sources([archive], tmp_path / "out", samples=False)
    assert not (tmp_path / "escape.txt").exists() and not list((tmp_path / "out").glob("*.py"))


def test_a_folder_is_referenced_in_place_or_copied(tmp_path: Path) -> None:
    repo = _bert_folder(tmp_path / "repo")
    (in_place,) = import_sources([repo], tmp_path / "a", samples=False)
    assert 'MODELS = Path(__file__).parent / "../repo"' in in_place.module.read_text()
    (copied,) = import_sources([repo], tmp_path / "b", copy_files=True, samples=False)
    assert 'MODELS = Path(__file__).parent / "repo"' in copied.module.read_text()
    assert contents(tmp_path / "b" / "repo") == contents(repo)


def test_the_command_writes_modules_and_says_what_their_rebuild_holds(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    archive = pack_repo(bert_repo(), tmp_path / "hand.tar.gz")
    assert main(["import", str(archive), "--out", str(tmp_path / "out"), "--no-sample"]) == 0
    out = capsys.readouterr().out
    assert (f"wrote {tmp_path / 'out' / 'ensemble.py'}: ensemble 'ensemble'; its rebuild holds 4 equal config(s) "
            "and 5 identical file(s)") in out
    assert main(["import", str(archive), "--out", str(tmp_path / "out")]) == 2
    assert "exists already (from an earlier import?)" in capsys.readouterr().err


@pytest.mark.integration
def test_a_hand_made_repository_with_unmodelled_fields_imports_builds_checks_and_replays(
        tmp_path: Path, triton: object, capsys: pytest.CaptureFixture[str]) -> None:
    """response_cache, ONNX Runtime's TensorRT accelerator, a sequence batcher and a rate limiter on a
    hand-written model.py: the replay sends each sample as a sequence of one, as a client must."""
    from conch.replays.local_replay import replay_archives

    repo = handmade.write(tmp_path / "repo")
    (imported,) = import_sources([repo], tmp_path / "out")
    assert imported.messages == []
    assert imported.sample == ("captured on the local tritonserver from generated inputs (shop.samples.json); sent "
                               "as a sequence of one for the sequence batcher of scale")
    text = imported.module.read_text()
    for field in ("response_cache", "gpu_execution_accelerator", "rate_limiter", "sequence_batching"):
        assert field in text
    assert_same(repo, build_module(imported.module, tmp_path / "production"))
    local = build_module(imported.module, tmp_path / "local", "local")
    assert check_archive_models(local)[0].ok
    report = replay_archives([local], server=triton)  # type: ignore[arg-type]
    assert report.passed, report.table()
    sent = [row for row in report.rows if row.sample != "-"]
    assert sent, report.table()  # else the all() below holds of nothing
    assert all("sent as a sequence of one: scale has a sequence batcher" in row.detail for row in sent)
    assert main(["inspect", str(local)]) == 0
    shown = capsys.readouterr().out
    assert "response_cache { enable: true }" in shown
    assert 'rate_limiter { resources { name: "R1" count: 1 } priority: 1 }' in shown
    assert "sequence_batching { max_sequence_idle_microseconds: 5000000 direct { } }" in shown


def test_a_config_left_to_auto_complete_is_declared_from_the_model_file_and_named(tmp_path: Path) -> None:
    repo = handmade.write(tmp_path / "repo")
    (repo / "affine/config.pbtxt").write_text('platform: "onnxruntime_onnx"\nmax_batch_size: 8\n')
    (imported,) = import_sources([repo], tmp_path / "out", samples=False)
    assert imported.messages == [
        "affine/config.pbtxt: name: not given (Triton takes the folder's); conch writes name: 'affine'",
        "affine/config.pbtxt: input/output: not declared (Triton completes them from the model file); conch "
        "declares them, read from the model file where it can",
        "affine/config.pbtxt: the rebuilt config differs: field(s) input, output",
    ]
    rebuilt = contents(build_module(imported.module, tmp_path / "built"))
    assert 'name: "y"' in rebuilt["affine/config.pbtxt"].decode()


def test_a_model_no_ensemble_runs_is_named(tmp_path: Path) -> None:
    repo = _bert_folder(tmp_path / "repo")
    spare = repo / "spare"
    spare.mkdir()
    (spare / "config.pbtxt").write_bytes((repo / "bert-trt/config.pbtxt").read_bytes().replace(b"bert-trt", b"spare"))
    (imported,) = import_sources([repo], tmp_path / "out", samples=False)
    assert imported.messages == ["spare/config.pbtxt: not imported: no ensemble of repo runs it"]


@pytest.mark.parametrize(("files", "warmup", "declared"), [
    pytest.param({"affine/warmup/x.bin": bytes(16)},
                 'model_warmup { name: "ones" batch_size: 1 inputs { key: "x" value { data_type: TYPE_FP32 '
                 'dims: [ 4 ] input_data_file: "x.bin" } } }\n',
                 'warmup_files={"x.bin": MODELS / "affine/warmup/x.bin"}', id="data-files-are-kept"),
    pytest.param({},
                 'model_warmup { name: "zeros" batch_size: 8 count: 2 inputs { key: "x" value { data_type: '
                 'TYPE_FP32 dims: [ 4 ] zero_data: true } } }\n',
                 'warmup=[Warmup("zeros", batch_size=8, count=2)]', id="typed-warmups-are-declared-typed"),
])
def test_warmups_are_declared_and_rebuild_the_same(
    tmp_path: Path, files: dict[str, bytes], warmup: str, declared: str
) -> None:
    repo = handmade.write(tmp_path / "repo")
    for name, data in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_bytes(data)
    with (repo / "affine/config.pbtxt").open("a") as fh:
        fh.write(warmup)
    (imported,) = import_sources([repo], tmp_path / "out", samples=False)
    assert imported.messages == []
    assert declared in imported.module.read_text()
    assert_same(repo, build_module(imported.module, tmp_path / "built"))


def test_a_pipeline_serialized_by_dali_itself_is_kept_byte_for_byte(tmp_path: Path) -> None:
    from nvidia.dali import fn, pipeline_def, types

    @pipeline_def(batch_size=8, num_threads=1, device_id=None)
    def scale() -> object:
        return fn.cast(fn.external_source(name="x", dtype=types.FLOAT), dtype=types.FLOAT) * 2

    root = tmp_path / "repo"
    for folder in ("dali/1", "shop/1"):
        (root / folder).mkdir(parents=True)
    (root / "dali/1/model.dali").write_bytes(scale().serialize())
    (root / "dali/config.pbtxt").write_text(
        'name: "dali"\nbackend: "dali"\nmax_batch_size: 8\ninput [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "y" data_type: TYPE_FP32 dims: [ 4 ] } ]\n')
    (root / "shop/config.pbtxt").write_text(
        handmade.ENSEMBLE.replace('{ model_name: "scale" model_version: -1\n      input_map { key: "x" value: "X" }\n'
                                  '      output_map { key: "y" value: "doubled" } },\n', "")
        .replace('"affine"', '"dali"').replace('"doubled"', '"X"').replace("response_cache { enable: true }\n", ""))
    (imported,) = import_sources([root], tmp_path / "out", samples=False)
    assert imported.messages == []
    assert "as_is=True" in imported.module.read_text()
    assert_same(root, build_module(imported.module, tmp_path / "built"))


def test_as_is_takes_a_serialized_pipeline_only() -> None:
    from conch import DaliStep, DeclarationError, Tensor

    with pytest.raises(DeclarationError, match="as_is=True lays out a serialized pipeline byte for byte, so pass"):
        DaliStep("d", lambda: None, inputs=[Tensor("x", "FP32", [4])],
                 outputs=[Tensor("y", "FP32", [4])], max_batch_size=1,
                 as_is=True)


def test_a_folder_name_of_the_source_does_not_run_as_code_when_the_module_is_imported(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = handmade.write(tmp_path / "repo")
    name = 'x"""+__import__("pathlib").Path("RAN").touch()+"""'
    (repo / "shop/config.pbtxt").write_text(handmade.ENSEMBLE.replace('name: "shop"\n', ""))
    (repo / "shop").rename(repo / name)
    monkeypatch.chdir(tmp_path)
    (imported,) = import_sources([repo], tmp_path / "out", samples=False)
    assert not (tmp_path / "RAN").exists()
    assert f"ensemble: name {name!r} contains" in " ".join(imported.messages)
    docstring = imported.module.read_text().splitlines()[0]
    assert docstring.startswith("'Ensemble ") and "__import__" in docstring


def test_an_environment_path_outside_the_repository_is_not_declared_beside_it(tmp_path: Path) -> None:
    outside = tmp_path / "outside.tar.gz"
    outside.write_bytes(b"not in the repository")
    repo = _bert_folder(tmp_path / "repo", ("preprocess/config.pbtxt", "$$TRITON_MODEL_DIRECTORY/processing_env.tar.gz",
                                            f"$$TRITON_MODEL_DIRECTORY/../{outside}"))
    (imported,) = import_sources([repo], tmp_path / "out", samples=False)
    text = imported.module.read_text()
    assert "beside=" not in text.split("preprocess = ", 1)[1].split("postprocess = ", 1)[0]
    assert f"../{outside}" in text  # the parameter, kept as written


# What a generated module may import from conch: the package's exports, and the documented reader of the
# samples file `conch import` writes beside it (docs/import.md).
PUBLIC_MODULES = {"conch", "conch.ensembles.samples"}


def test_a_generated_module_imports_only_conchs_public_api_and_runs_on_its_own(tmp_path: Path) -> None:
    import ast
    import subprocess

    from conftest import linear_ensemble

    from conch.archive.manifest import read_manifest

    archive = build_ensemble(linear_ensemble("public_api"), tmp_path / "dist", "production")
    (imported,) = import_sources([archive], tmp_path / "out", samples=True)
    tree = ast.parse(imported.module.read_text())
    used = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module} | {
        a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert {m for m in used if m.split(".")[0] == "conch"} <= PUBLIC_MODULES, sorted(used)
    ran = subprocess.run([sys.executable, str(imported.module)], capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    (ensemble,) = load_module_ensembles(imported.module)
    sys.modules.pop(imported.module.stem, None)
    (kept,) = read_manifest(archive).samples
    (sample,) = ensemble.samples
    assert sample.name == kept.name
    assert all((sample.inputs[k] == v).all() for k, v in kept.input_arrays().items())


def test_a_samples_file_that_is_not_one_is_named_with_the_fix(tmp_path: Path) -> None:
    from conch.ensembles.samples import read_samples
    from conch.errors import DeclarationError

    broken = tmp_path / "shop.samples.json"
    broken.write_text('{"samples": [{"name": "x"}]}')
    with pytest.raises(DeclarationError, match=r"shop.samples.json: not a samples file conch can read \(KeyError: "
                       "'inputs'\\); it is the file `conch import` wrote beside the module: import again"):
        read_samples(broken)
    with pytest.raises(DeclarationError, match="gone.samples.json: not a samples file conch can read .FileNotFound"):
        read_samples(tmp_path / "gone.samples.json")
