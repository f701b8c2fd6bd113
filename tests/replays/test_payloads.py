"""Payload folders: request bodies (KServe v2 JSON, binary+json) with expected outputs beside them, read as
samples; `conch replay --record` writes one, `--payloads` replays it; JUnit XML of a replay."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import basic_steps
import numpy as np
import pytest
from conftest import half_ensemble, linear_ensemble

from conch import DeclarationError, Ensemble, PythonStep, Tensor, TopK
from conch.builder.repository_build import build_ensemble
from conch.ensembles.payloads import add_samples, parse_request, read_payloads
from conch.replays.junit_xml import junit_tree, write_junit
from conch.replays.local_replay import replay_archives
from conch.replays.recording import NOTE, Recorder, file_stem, write_payload
from conch.triton.server import LocalTriton
from conch.verdicts import ReplayReport, ReplayRow
from conch.wire import binary_request, json_request


def _expected(folder: Path, stem: str, body: dict) -> None:  # type: ignore[type-arg]
    (folder / f"{stem}.expected.json").write_text(json.dumps(body))


def test_a_kserve_json_request_and_its_expected_outputs_read_as_a_sample(tmp_path: Path) -> None:
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    (tmp_path / "rows.request.json").write_bytes(json_request({"X": x})[0])
    _expected(tmp_path, "rows", {"outputs": {"Z": {"datatype": "FP32", "shape": [2, 4], "data": (x * 2 + 1).tolist()}},
                                 "checks": {"Z": {"kind": "tolerance", "atol": 0.001}}})
    (payload,) = read_payloads(tmp_path)
    assert payload.name == "rows" and not payload.recorded
    np.testing.assert_array_equal(payload.inputs["X"], x)
    np.testing.assert_array_equal(payload.expected["Z"], x * 2 + 1)
    assert payload.checks["Z"].describe() == "atol=0.001 rtol=1e-05"


def test_a_binary_request_reads_with_and_without_its_content_type(tmp_path: Path) -> None:
    inputs = {"X": np.ones((1, 4), np.float16), "T": np.array([[b"\xff\x00raw"], [b"text"]], dtype=object)}
    body, content_type = binary_request(inputs)
    for given in (content_type, None):
        got = parse_request(body, given)
        np.testing.assert_array_equal(got["X"], inputs["X"])
        assert got["X"].dtype == np.float16
        assert got["T"].tolist() == inputs["T"].tolist()
    (tmp_path / "b.request.bin").write_bytes(body)
    _expected(tmp_path, "b", {"outputs": {"Y": {"datatype": "FP16", "shape": [1, 4], "data": [2, 2, 2, 2]}},
                              "checks": {"Y": {"kind": "top_k", "k": 2}}, "request_content_type": content_type,
                              "sample": "binary one"})
    (payload,) = read_payloads(tmp_path)
    assert payload.name == "binary one" and payload.checks == {"Y": TopK(2)}


def test_recorded_payloads_read_back_exactly_and_are_marked(tmp_path: Path) -> None:
    inputs = {"X": np.ones((1, 4), np.float16)}  # FP16: no JSON body, so the request is binary
    outputs = {"Y": np.array([[0.1, 1 / 3, 2.5, -7]], np.float16), "T": np.array([[b"\xfe"]], dtype=object)}
    write_payload(tmp_path, file_stem("odd name/1"), "odd name/1", inputs, outputs, {})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["odd_name_1.expected.json", "odd_name_1.request.bin"]
    meta = json.loads((tmp_path / "odd_name_1.expected.json").read_text())
    assert meta["recorded"] is True and meta["note"] == NOTE
    (payload,) = read_payloads(tmp_path)
    assert payload.name == "odd name/1" and payload.recorded
    np.testing.assert_array_equal(payload.expected["Y"], outputs["Y"])
    assert payload.expected["T"].tolist() == [[b"\xfe"]]


def test_payloads_declare_samples_on_an_ensemble(tmp_path: Path) -> None:
    ens = linear_ensemble("from_files")
    x = np.zeros((1, 4), np.float32)
    (tmp_path / "zeros.request.json").write_bytes(json_request({"X": x})[0])
    _expected(tmp_path, "zeros", {"outputs": {"Z": {"datatype": "FP32", "shape": [1, 4], "data": [[1, 1, 1, 1]]}}})
    add_samples(ens, tmp_path)
    assert [s.name for s in ens.samples] == ["two rows", "zeros"]


@pytest.mark.parametrize(("files", "words"), [
    ({}, "no payloads in it"),
    ({"a.request.json": "{}"}, "a.request.json: no a.expected.json beside it, so nothing to compare the answer with; "
     "write the expected outputs there (or record them: `conch replay --record DIR`)"),
    ({"a.expected.json": "{}"}, "no request beside it (a.request.json or a.request.bin)"),
    ({"a.request.json": "{}", "a.request.bin": "{}", "a.expected.json": "{}"},
     "sample 'a' has both a.request.json and a.request.bin; keep one"),
    ({"a.request.json": "{}", "a.expected.json": "[1]"}, "expected a JSON object"),
    ({"a.request.json": "{}", "a.expected.json": "{nope"}, "a.expected.json: not JSON (Expecting property name"),
    ({"a.request.json": "{}", "a.expected.json": "{}"}, "no \"outputs\": give the expected value"),
    ({"a.request.json": "{}", "a.expected.json": '{"outputs": {"Z": {"datatype": "FP32", "shape": [1], "data": [1]}},'
      ' "checks": {"W": {"kind": "exact"}}}'}, "\"checks\" must map outputs of \"outputs\" to checks"),
    ({"a.request.json": "{}", "a.expected.json": '{"outputs": {"Z": {"datatype": "FP32", "shape": [2], "data": [1]}}}'},
     "tensors are {\"datatype\", \"shape\", \"data\"}"),
    ({"a.request.json": '{"inputs": 3}', "a.expected.json": '{"outputs": {"Z": {"datatype": "FP32", "shape": [1], '
      '"data": [1]}}}'}, "not a KServe v2 JSON inference request conch can read (no 'inputs' list)"),
])
def test_a_payload_folder_conch_cannot_read_says_which_file_and_the_fix(
        tmp_path: Path, files: dict[str, str], words: str) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(DeclarationError) as raised:
        read_payloads(tmp_path)
    assert words in str(raised.value)


def test_a_missing_payload_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(DeclarationError) as raised:
        read_payloads(tmp_path / "nowhere")
    assert "no such payload folder" in str(raised.value)


def test_a_binary_body_that_runs_short_is_refused(tmp_path: Path) -> None:
    body, content_type = binary_request({"X": np.ones((1, 4), np.float32)})
    with pytest.raises(ValueError, match="runs past the end of the body"):
        parse_request(body[:-2], content_type)
    with pytest.raises(ValueError, match="2 bytes after the last input's binary data"):
        parse_request(body + b"..", content_type)


def test_a_json_request_file_may_end_in_white_space(tmp_path: Path) -> None:
    """An editor's final newline ends the JSON text; after binary data the same bytes are refused."""
    body, _ = json_request({"X": np.arange(3, dtype=np.float32)})
    np.testing.assert_array_equal(parse_request(body + b"\n\n")["X"], np.arange(3, dtype=np.float32))
    with pytest.raises(ValueError, match="1 bytes after the last input's binary data"):
        parse_request(body + b"x")
    binary, content_type = binary_request({"X": np.ones((1, 4), np.float32)})
    with pytest.raises(ValueError, match="1 bytes after the last input's binary data"):
        parse_request(binary + b"\n", content_type)


def test_junit_xml_has_a_suite_per_ensemble_and_a_case_per_sample_and_endpoint(tmp_path: Path) -> None:
    report = ReplayReport([
        ReplayRow("a.tar.gz", "-", "load", True, "loaded", 12.0),
        ReplayRow("a.tar.gz", "s1", "kserve", True, "Z: max abs err 0", 1.5),
        ReplayRow("a.tar.gz", "s1", "sagemaker-json", False, "Z: min cosine 0.5, max abs err 3"),
        ReplayRow("b.tar.gz", "s1", "sagemaker-json", True, "not applicable: FP16", applicable=False),
    ])
    write_junit(report, tmp_path / "out" / "r.xml")
    root = ET.parse(tmp_path / "out" / "r.xml").getroot()
    assert root.tag == "testsuites" and root.get("tests") == "4" and root.get("failures") == "1"
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == ["conch replay: a", "conch replay: b"]
    cases = suites[0].findall("testcase")
    assert [c.get("name") for c in cases] == ["a[- @ load]", "a[s1 @ kserve]", "a[s1 @ sagemaker-json]"]
    failure = cases[2].find("failure")
    assert failure is not None and "min cosine 0.5, max abs err 3" in (failure.text or "")
    assert suites[1].find("testcase/skipped") is not None and suites[1].get("skipped") == "1"
    assert junit_tree(ReplayReport()).get("tests") == "0"


@pytest.mark.integration
def test_record_then_replay_the_folder_is_green_and_a_changed_model_fails(tmp_path: Path, triton: LocalTriton) -> None:
    archive = build_ensemble(linear_ensemble("payload_linear"), tmp_path, "local")
    recorder = Recorder(tmp_path / "recorded")
    first = replay_archives([archive], server=triton, heard=recorder.heard)
    assert first.passed, first.table()
    (folder,) = recorder.write()
    assert folder == tmp_path / "recorded" / "payload_linear"
    assert sorted(p.name for p in folder.iterdir()) == ["two_rows.expected.json", "two_rows.request.json"]

    def from_folder(archive: Path, manifest: object) -> list:  # type: ignore[type-arg]
        return read_payloads(folder)

    # a server of its own: the archive is loaded on the shared one already
    again = replay_archives([archive], samples=from_folder, endpoints=["sagemaker-binary"])
    assert again.passed, again.table()

    changed = Ensemble("payload_changed", max_batch_size=8)  # the same I/O, a different model: X * 4
    dbl = PythonStep("double", basic_steps.double, inputs=[Tensor("x", "FP32", [4])],
                     outputs=[Tensor("y", "FP32", [4])],
                     max_batch_size=8)
    twice = PythonStep("double_again", basic_steps.double, inputs=[Tensor("x", "FP32", [4])],
                       outputs=[Tensor("y", "FP32", [4])],
                       max_batch_size=8)
    changed.output("Z", twice(dbl(changed.input("X", "FP32", [4]))))
    changed.sample("any", {"X": np.ones((1, 4), np.float32)}, {"Z": np.full((1, 4), 4, np.float32)})
    report = replay_archives([build_ensemble(changed, tmp_path, "local")], server=triton, samples=from_folder)
    failed = [r for r in report.rows if not r.passed]
    assert [(r.sample, r.endpoint) for r in failed] == [("two rows", e) for e in
                                                         ("kserve", "sagemaker-json", "sagemaker-binary")]
    assert "Z: max abs err 13 (atol=1e-05 rtol=1e-05)" in failed[0].detail  # 4 * 7 against 2 * 7 + 1


@pytest.mark.integration
def test_an_fp16_sample_records_a_binary_request_and_replays_it(tmp_path: Path, triton: LocalTriton) -> None:
    archive = build_ensemble(half_ensemble("payload_halves"), tmp_path, "local")
    recorder = Recorder(tmp_path / "rec")
    assert replay_archives([archive], server=triton, heard=recorder.heard).passed
    (folder,) = recorder.write()
    assert (folder / "ones.request.bin").is_file()
    report = replay_archives([archive], samples=lambda a, m: read_payloads(folder))  # a server of its own
    assert report.passed, report.table()
    assert [r.result for r in report.rows if r.endpoint == "sagemaker-json"] == ["n/a"]
