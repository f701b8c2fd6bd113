"""Single-model archives replayed on the real tritonserver, loaded as SageMaker's front end loads them (one model
folder, or a config.pbtxt at the root), with a --payload (a KServe v2 JSON request, or the samples file `conch
import` writes); and several archives replayed together, checked together first."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import linear_ensemble
from seed_archives import pack_repo
from single_models import ADD_SUB_INPUTS, add_sub_payload, add_sub_repo, simple_repo

from conch.builder.repository_build import build_ensemble
from conch.ensembles.dtypes import DType
from conch.ensembles.payloads import read_payload_file
from conch.errors import ServeError
from conch.importer.generated_samples import record, write_samples
from conch.replays.local_replay import replay_archives
from conch.triton.server import LocalTriton
from conch.wire import binary_request, json_request


def rows(report: object) -> list[tuple[str, str, str, bool]]:
    return [(r.ensemble, r.sample, r.endpoint, r.passed) for r in report.rows]  # type: ignore[attr-defined]


@pytest.mark.parametrize("folder", ["add_sub", ""], ids=["model-folder", "root-config"])
def test_a_single_model_archive_replays_a_kserve_request(tmp_path: Path, triton: LocalTriton, folder: str) -> None:
    archive = pack_repo(add_sub_repo(folder), tmp_path / f"single-{folder or 'root'}.tar.gz")
    payloads = read_payload_file(add_sub_payload(tmp_path / "request.json"))
    report = replay_archives([archive], server=triton, payloads=payloads)
    assert report.passed, report.table()
    name = archive.name
    assert rows(report) == [(name, "-", "load", True), (name, "request.json", "kserve", True),
                            (name, "request.json", "sagemaker-json", True),
                            (name, "request.json", "sagemaker-binary", True)]
    first, json_row = report.rows[1], report.rows[2]
    assert first.detail == "answered OUTPUT0, OUTPUT1 (nothing expected: the other endpoints must answer the same)"
    assert json_row.detail.startswith("the same as kserve answered: OUTPUT0: max abs err 0")


def test_the_samples_conch_import_writes_are_judged(tmp_path: Path, triton: LocalTriton) -> None:
    a, b = ADD_SUB_INPUTS["INPUT0"], ADD_SUB_INPUTS["INPUT1"]
    dtypes = dict.fromkeys(["INPUT0", "INPUT1", "OUTPUT0", "OUTPUT1"], DType.FP32)
    good = record("good", ADD_SUB_INPUTS, {"OUTPUT0": a + b, "OUTPUT1": a - b}, dtypes)
    wrong = record("wrong", ADD_SUB_INPUTS, {"OUTPUT0": a + b + 1, "OUTPUT1": a - b}, dtypes)
    write_samples(tmp_path / "samples.json", [good, wrong], "add_sub")
    archive = pack_repo(add_sub_repo(), tmp_path / "judged.tar.gz")
    report = replay_archives([archive], server=triton, endpoints=["sagemaker-binary"],
                             payloads=read_payload_file(tmp_path / "samples.json"))
    assert rows(report)[1:] == [("judged.tar.gz", "good", "sagemaker-binary", True),
                                ("judged.tar.gz", "wrong", "sagemaker-binary", False)]
    assert "OUTPUT0: max abs err 1" in report.rows[2].detail


def test_an_archive_without_samples_or_payload_is_refused(tmp_path: Path, triton: LocalTriton) -> None:
    archive = pack_repo(add_sub_repo(), tmp_path / "bare.tar.gz")
    (row,) = replay_archives([archive], server=triton).rows
    assert row.endpoint == "check" and not row.passed
    assert row.detail == ("bare.tar.gz has no conch-manifest.json, so no samples to replay; give --payload FILE (a "
                          "KServe v2 JSON request, or the samples file `conch import` writes), or build it with "
                          "`conch build`")


def test_a_model_of_a_backend_the_local_server_lacks_is_explained(tmp_path: Path, triton: LocalTriton) -> None:
    archive = pack_repo(simple_repo(), tmp_path / "simple.tar.gz")
    request = tmp_path / "r.json"
    request.write_text(json.dumps({"inputs": [{"name": n, "datatype": "INT32", "shape": [1, 16],
                                               "data": list(range(16))} for n in ("INPUT0", "INPUT1")]}))
    (row,) = replay_archives([archive], server=triton, payloads=read_payload_file(request)).rows
    assert row.endpoint == "load" and not row.passed
    assert row.detail.startswith("simple.tar.gz holds model(s) simple (onnxruntime_onnx) whose backends the local "
                                 "server lacks (it runs python models); replay them where their backend runs (`conch "
                                 "deploy`), or declare them in conch for a local build with CPU stand-ins")


def test_a_payload_that_is_no_request_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"input": []}')
    with pytest.raises(ServeError, match=r"--payload .*bad.json: not a KServe v2 JSON request \(no 'inputs' list\); "
                       r"write \{\"inputs\": \[\{\"name\": \.\.\., \"shape\": \[\.\.\.\], \"datatype\": \.\.\., "
                       r"\"data\": \[\.\.\.\]\}\]\}, or give the samples file `conch import` writes"):
        read_payload_file(bad)
    with pytest.raises(ServeError, match=r"--payload .*missing.json: cannot read it \(No such file"):
        read_payload_file(tmp_path / "missing.json")
    samples = tmp_path / "samples.json"
    samples.write_text('{"samples": [{"name": 1}]}')
    with pytest.raises(ServeError, match="--payload .*samples.json: not a samples file conch can read"):
        read_payload_file(samples)


def test_a_request_with_an_input_named_samples_is_a_request(tmp_path: Path) -> None:
    """The one reader of `--payload` for replay, bench and plan: a KServe request (JSON, or binary+json) whose
    input is named ``samples`` (common for audio) is a request, not the samples file `conch import` writes."""
    audio = np.linspace(-1, 1, 8, dtype=np.float32).reshape(1, 8)
    bodies = {"audio.json": json_request({"samples": audio})[0], "audio.bin": binary_request({"samples": audio})[0]}
    for path, data in ((tmp_path / name, body) for name, body in bodies.items()):
        path.write_bytes(data)
        (payload,) = read_payload_file(path)
        assert payload.name == path.name and not payload.expected
        np.testing.assert_array_equal(payload.inputs["samples"], audio)


def test_archives_that_share_step_names_are_named_before_loading(tmp_path: Path, triton: LocalTriton) -> None:
    """Two copies of one archive hold the same step models: the second is refused in `conch check`'s words
    (without the fleet check first, Triton answers with its raw error)."""
    built = build_ensemble(linear_ensemble("twinned"), tmp_path / "built", "local")
    first, second = tmp_path / "first.tar.gz", tmp_path / "second.tar.gz"
    first.write_bytes(built.read_bytes())
    second.write_bytes(built.read_bytes())
    report = replay_archives([first, second], server=triton, endpoints=["sagemaker-binary"])
    assert [r for r in rows(report) if r[0] == "first.tar.gz"] and all(
        r[3] for r in rows(report) if r[0] == "first.tar.gz")
    (refused,) = [r for r in report.rows if r.ensemble == "second.tar.gz"]
    assert refused.endpoint == "check" and not refused.passed
    assert refused.detail.startswith("fleet: first.tar.gz, second.tar.gz both hold step models twinned__add_one, "
                                     "twinned__double: on one endpoint")
    assert refused.detail.endswith("(not loaded: first.tar.gz holds them and loaded first)")


def test_conch_replay_takes_a_single_model_archive_and_a_payload(tmp_path: Path) -> None:
    archive = pack_repo(add_sub_repo(), tmp_path / "add_sub.tar.gz")
    request = add_sub_payload(tmp_path / "request.json")
    done = subprocess.run([sys.executable, "-m", "conch.cli", "replay", str(archive), "--payload", str(request),
                           "--json"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    document = json.loads(done.stdout)
    assert [r["passed"] for r in document["rows"]] == [True] * 4


def test_a_request_whose_input_lacks_a_field_is_refused(tmp_path: Path) -> None:
    request = tmp_path / "partial.json"
    request.write_text('{"inputs": [{"name": "INPUT0", "datatype": "FP32"}]}')
    with pytest.raises(ServeError, match=r"--payload .*partial.json: not a KServe v2 JSON request \(an input lacks "
                       r"name, datatype, shape or data \(KeyError: 'data'\)\)"):
        read_payload_file(request)


def test_bench_asks_for_a_payload_for_an_archive_made_by_hand(tmp_path: Path) -> None:
    from conch.errors import BenchError
    from conch.perf.load.spec import archive_requests

    archive = pack_repo(add_sub_repo(), tmp_path / "hand.tar.gz")
    with pytest.raises(BenchError, match=r"hand.tar.gz has no conch-manifest.json \(not built by conch\?\); `conch "
                       r"check` checks any archive, this needs one built by `conch build`; give --payload FILE for "
                       r"an archive conch did not build"):
        archive_requests(archive)
    (request,) = archive_requests(archive, payloads=read_payload_file(add_sub_payload(tmp_path / "r.json")))
    assert request.sample == "r.json" and request.expected == {} and request.body_kind == "binary"
