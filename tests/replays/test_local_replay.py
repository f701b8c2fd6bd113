"""Replay against the real tritonserver, loaded the way SageMaker MME loads archives."""

from __future__ import annotations

from pathlib import Path

import basic_steps
import numpy as np
import pytest
from conftest import half_ensemble, linear_ensemble

from conch import Ensemble, PythonStep, ServeError, Tensor
from conch.archive.extract import safe_extract
from conch.builder.repository_build import build_ensemble
from conch.replays.local_replay import ENDPOINTS, replay_archives
from conch.triton.mme import InvokeError, MultiModelClient
from conch.triton.server import LocalTriton

pytestmark = pytest.mark.integration


def one_step(name: str, code, dtype: str = "FP32", mbs: int = 4) -> Ensemble:  # type: ignore[no-untyped-def]
    ens = Ensemble(name, max_batch_size=mbs)
    step = PythonStep(code.__name__.lower(), code, inputs=[Tensor("x", dtype, [4])], outputs=[Tensor("y", "FP32", [4])],
                      max_batch_size=mbs)
    ens.output("Y", step(ens.input("X", dtype, [4])))
    x = np.ones((2, 4), np.float32)
    ens.sample("ones", {"X": x}, {"Y": x * 2})
    return ens


def test_linear_ensemble_replays_green_on_every_endpoint(tmp_path: Path, triton: LocalTriton) -> None:
    archive = build_ensemble(linear_ensemble("replay_linear"), tmp_path, "local")
    report = replay_archives([archive], server=triton)
    assert report.passed, report.table()
    assert {r.endpoint for r in report.rows} == {"load", *ENDPOINTS}
    assert "3 passed, 0 failed" in report.table() or "4 passed, 0 failed" in report.table()


def test_two_ensembles_from_one_declaration_load_side_by_side(tmp_path: Path, triton: LocalTriton) -> None:
    archives = [build_ensemble(linear_ensemble(n), tmp_path, "local") for n in ("side_a", "side_b")]
    report = replay_archives(archives, server=triton, endpoints=["sagemaker-binary"])
    assert report.passed, report.table()
    client = MultiModelClient(triton.sagemaker_url, triton.http_url)
    for archive in archives:
        described = client.describe(archive.name)
        assert described is not None and described["modelUrl"].endswith(archive.name.removesuffix(".tar.gz"))
    assert client.describe("never_loaded.tar.gz") is None
    x = np.full((1, 4), 3, np.float32)
    for archive in archives:  # both still answer after the other loaded
        np.testing.assert_array_equal(client.invoke_binary(archive.name, {"X": x})["Z"], x * 2 + 1)


def test_class_step_with_file_and_bytes_of_different_lengths(tmp_path: Path, triton: LocalTriton) -> None:
    (tmp_path / "prefix.txt").write_bytes(b">> ")
    ens = Ensemble("prefixer", max_batch_size=8)
    step = PythonStep("prefix", basic_steps.Prefixer, inputs=[Tensor("TEXT", "BYTES", [1])],
                      outputs=[Tensor("OUT", "BYTES", [1])],
                      files={"prefix.txt": tmp_path / "prefix.txt"}, max_batch_size=8)
    ens.output("OUT", step(ens.input("TEXT", "BYTES", [1])))
    texts = ["a", "a much longer string", "ünïcödé ✓", ""]
    ens.sample("texts", {"TEXT": [[t] for t in texts]}, {"OUT": [[b">> " + t.encode()] for t in texts]})
    report = replay_archives([build_ensemble(ens, tmp_path, "local")], server=triton)
    assert report.passed, report.table()


def test_exception_in_user_code_names_the_step_and_shows_the_error(tmp_path: Path, triton: LocalTriton) -> None:
    archive = build_ensemble(one_step("broken_code", basic_steps.broken), tmp_path, "local")
    report = replay_archives([archive], server=triton)
    assert not report.passed
    failures = [r for r in report.rows if not r.passed]
    assert len(failures) == len(ENDPOINTS)
    for row in failures:
        assert "step 'broken' of ensemble 'broken_code' raised ValueError" in row.detail
        assert "the user code failed on purpose" in row.detail


def test_wrong_output_dtype_names_step_and_tensor(tmp_path: Path, triton: LocalTriton) -> None:
    archive = build_ensemble(one_step("wrong_dtype", basic_steps.wrong_dtype), tmp_path, "local")
    report = replay_archives([archive], server=triton, endpoints=["sagemaker-json"])
    (row,) = [r for r in report.rows if not r.passed]
    assert "step 'wrong_dtype'" in row.detail
    assert "output 'y' is declared FP32 (numpy float32) but the code returned dtype float64" in row.detail


def test_mismatch_is_reported_with_the_error(tmp_path: Path, triton: LocalTriton) -> None:
    ens = one_step("mismatch", basic_steps.double)
    ens.samples[0].expected = {"Y": np.full((2, 4), 5, np.float32)}
    report = replay_archives([build_ensemble(ens, tmp_path, "local")], server=triton, endpoints=["kserve"])
    (row,) = [r for r in report.rows if r.endpoint == "kserve"]
    assert not row.passed and "max abs err 3" in row.detail
    assert "1 failed" in report.table()


def test_a_hanging_load_times_out_with_the_server_log(tmp_path: Path) -> None:
    ens = Ensemble("slow_setup", max_batch_size=4)
    step = PythonStep("slow", basic_steps.SlowSetup, inputs=[Tensor("x", "FP32", [4])],
                      outputs=[Tensor("y", "FP32", [4])],
                      max_batch_size=4)
    ens.output("Y", step(ens.input("X", "FP32", [4])))
    ens.sample("s", {"X": np.ones((1, 4), np.float32)}, {"Y": np.ones((1, 4), np.float32)})
    archive = build_ensemble(ens, tmp_path, "local")
    with LocalTriton() as server:  # its own server: the hung load keeps a stub busy
        report = replay_archives([archive], server=server, load_timeout=3)
    (row,) = report.rows
    assert not row.passed and row.endpoint == "load"
    assert "did not finish within 3 s" in row.detail


def test_load_of_a_bad_archive_fails_with_the_server_error(tmp_path: Path, triton: LocalTriton) -> None:
    archive = build_ensemble(linear_ensemble("bad_config"), tmp_path, "local")
    folder = tmp_path / "unpacked"
    safe_extract(archive, folder)
    config = folder / "bad_config__double" / "config.pbtxt"
    config.write_text(config.read_text().replace("TYPE_FP32", "TYPE_INT8", 1))
    client = MultiModelClient(triton.sagemaker_url, triton.http_url)
    with pytest.raises(ServeError, match="loading 'bad_config.tar.gz' failed"):
        client.load("bad_config.tar.gz", folder, timeout=60)
    with pytest.raises(InvokeError, match="^Not Found$") as caught:  # tritonserver's SageMaker front end: no model
        client.invoke_json("bad_config.tar.gz", {"X": np.ones((1, 4), np.float32)})
    assert caught.value.status == 404


def test_production_archive_with_backends_the_server_lacks_is_explained(tmp_path: Path, triton: LocalTriton) -> None:
    import onnx_models

    from conch import OnnxStep

    ens = Ensemble("prod_onnx", max_batch_size=8)
    step = OnnxStep("affine", onnx_models.affine(tmp_path / "a.onnx"), max_batch_size=8)
    ens.output("Y", step(ens.input("X", "FP32", [4])))
    ens.sample("s", {"X": np.ones((1, 4), np.float32)}, {"Y": np.full((1, 4), 3, np.float32)})
    report = replay_archives([build_ensemble(ens, tmp_path, "production")], server=triton)
    (row,) = report.rows
    assert not row.passed
    assert "prod_onnx__affine (onnxruntime_onnx) need backends the local server lacks" in row.detail
    assert "--target local" in row.detail


def test_unload_removes_the_archive_and_a_second_unload_fails(tmp_path: Path, triton: LocalTriton) -> None:
    from conch.replays.local_replay import stage

    archive = build_ensemble(linear_ensemble("unload_me"), tmp_path, "local")
    client = MultiModelClient(triton.sagemaker_url, triton.http_url)
    client.load(archive.name, stage(archive, triton), timeout=120)
    assert client.describe(archive.name) is not None
    client.unload(archive.name)
    assert client.describe(archive.name) is None
    with pytest.raises(InvokeError, match="^Not Found$") as caught:  # tritonserver's SageMaker front end: no model
        client.invoke_json(archive.name, {"X": np.ones((1, 4), np.float32)})
    assert caught.value.status == 404
    with pytest.raises(ServeError, match=r"unloading 'unload_me.tar.gz' failed \(HTTP \d+\)"):
        client.unload(archive.name)


def test_non_utf8_bytes_fail_only_the_json_endpoint(tmp_path: Path, triton: LocalTriton) -> None:
    ens = Ensemble("raw_bytes", max_batch_size=4)
    step = PythonStep("echo", basic_steps.Prefixer, inputs=[Tensor("TEXT", "BYTES", [1])],
                      outputs=[Tensor("OUT", "BYTES", [1])],
                      files={"prefix.txt": b""}, max_batch_size=4)
    ens.output("OUT", step(ens.input("TEXT", "BYTES", [1])))
    ens.sample("latin-1", {"TEXT": [[b"caf\xe9"]]}, {"OUT": [[b"caf\xe9"]]})
    report = replay_archives([build_ensemble(ens, tmp_path, "local")], server=triton)
    verdicts = {r.endpoint: r for r in report.rows if r.endpoint in ENDPOINTS}
    assert verdicts["kserve"].passed and verdicts["sagemaker-binary"].passed, report.table()
    assert not verdicts["sagemaker-json"].passed
    assert "input 'TEXT' holds non-UTF-8 bytes, which a JSON body cannot carry" in verdicts["sagemaker-json"].detail


def test_an_unknown_endpoint_is_refused_before_a_server_starts() -> None:
    from conch import ConchError

    with pytest.raises(ConchError, match=r"unknown endpoint 'grpc': use kserve, sagemaker-json, sagemaker-binary"):
        replay_archives([], endpoints=["grpc"])


def test_an_archive_without_a_manifest_fails_its_load_row(tmp_path: Path, triton: LocalTriton) -> None:
    import tarfile

    archive = build_ensemble(linear_ensemble("no_manifest"), tmp_path / "dist", "local")
    bare = tmp_path / "no_manifest.tar.gz"
    with tarfile.open(archive) as src, tarfile.open(bare, "w:gz") as dst:
        for member in src.getmembers():
            if member.name.lstrip("./") != "conch-manifest.json":
                dst.addfile(member, src.extractfile(member) if member.isfile() else None)
    (row,) = replay_archives([bare], server=triton).rows
    assert not row.passed and row.endpoint == "check"
    assert ("no_manifest.tar.gz has no conch-manifest.json, so no samples to replay; give --payload FILE (a KServe v2 "
            "JSON request, or the samples file `conch import` writes), or build it with `conch build`") in row.detail


def test_a_sample_that_expects_nothing_fails_its_row() -> None:
    """Archives built before samples without expected outputs were refused must not replay green."""
    from conch.ensembles.samples import Tolerance
    from conch.verdicts import judge

    row = judge("old.tar.gz", "empty", "kserve", {"Z": np.zeros(2, np.float32)}, {}, Tolerance(), 1.0)
    assert not row.passed and "expects no outputs" in row.detail


def test_a_staged_archive_whose_manifest_does_not_read_is_refused_by_its_name(tmp_path: Path) -> None:
    from conch.replays.local_replay import staged_check

    archive = build_ensemble(linear_ensemble("garbled"), tmp_path / "dist", "local")
    folder = tmp_path / "staged"
    safe_extract(archive, folder)
    (folder / "conch-manifest.json").write_text("{oops")
    with pytest.raises(ServeError, match=r"^garbled.tar.gz: its conch-manifest.json is not JSON"):
        staged_check(archive, folder)


def test_fp16_marks_the_json_row_not_applicable_and_json_really_fails(tmp_path: Path, triton: LocalTriton) -> None:
    """Triton's JSON cannot carry FP16: the SageMaker-JSON row says so instead of failing, the binary rows
    pass, `conch check` warns, and the server itself refuses the JSON body (what the row stands for)."""
    from conch.archive.fleet_check import check_archive_models

    archive = build_ensemble(half_ensemble("halves"), tmp_path, "local")
    from conch.archive.manifest import read_manifest

    assert [n for n in read_manifest(archive).notes if "needs binary bodies" in n] == [
        "ensemble 'halves' needs binary bodies: input 'X' is FP16, output 'Y' is FP16: Triton's JSON bodies cannot "
        "carry FP16 or BF16 (its HTTP front end answers 400 'sending FP16 data via JSON is not supported'); callers "
        "must send binary+json bodies (application/vnd.sagemaker-triton.binary+json;json-header-size=N)"]
    (warning,) = check_archive_models(archive)[0].findings
    assert warning.level == "warning" and warning.file == "halves/config.pbtxt"
    assert warning.message.startswith("needs binary bodies: input 'X' is FP16, output 'Y' is FP16: "
                                      "Triton's JSON bodies cannot carry FP16 or BF16")
    report = replay_archives([archive], server=triton)
    assert report.passed, report.table()
    (row,) = [r for r in report.rows if r.endpoint == "sagemaker-json"]
    assert not row.applicable and row.result == "n/a"
    assert row.detail.startswith("not applicable: input 'X' is FP16, output 'Y' is FP16: Triton's JSON bodies")
    assert report.table().endswith("3 passed, 0 failed, 1 not applicable")
    client = MultiModelClient(triton.sagemaker_url, triton.http_url)
    with pytest.raises(InvokeError, match=r"receiving FP16 data via JSON is not supported"):
        client.invoke_json("halves.tar.gz", {"X": np.ones((2, 4), np.float16)})


def test_a_non_batching_step_inside_a_batching_ensemble_replays(tmp_path: Path, triton: LocalTriton) -> None:
    """Triton loads and runs a step with max_batch_size 0 inside an ensemble that batches, when the step's dims are
    the batch and then the ensemble's (tests/archive/load_rule_cases.py, non_batching_step_in_batching_ensemble)."""
    ens = Ensemble("wholebatch", max_batch_size=2)
    whole = PythonStep("whole", basic_steps.double, inputs=[Tensor("x", "FP32", [-1, 4])],
                       outputs=[Tensor("y", "FP32", [-1, 4])],
                       max_batch_size=0)
    ens.output("Y", whole(ens.input("X", "FP32", [4])))
    data = np.arange(8, dtype=np.float32).reshape(2, 4)
    ens.sample("two rows", {"X": data}, {"Y": data * 2})
    report = replay_archives([build_ensemble(ens, tmp_path, "local")], server=triton)
    assert report.passed, report.table()
