"""The KServe v2 / SageMaker wire format every client shares: requests encode BYTES and numbers exactly as
the parsers read them back, and a JSON request body is checked before it is sent."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conch.ensembles.payloads import check_json_request
from conch.errors import ServeError
from conch.triton.mme_contract import sequence_parameters
from conch.wire import (
    binary_request,
    encode_request,
    json_request,
    parse_binary_response,
    parse_json_response,
)


def test_json_bodies_are_kserve_v2_requests() -> None:
    """The body as the KServe v2 protocol writes it (names, shapes, wire datatypes, row-major data, BYTES as
    UTF-8 text), compared with the protocol's own form rather than read back by conch's parser."""
    inputs = {"X": np.arange(6, dtype=np.float32).reshape(2, 3), "T": np.array([[b"caf\xc3\xa9"]], dtype=object)}
    body, content_type = encode_request(inputs, "json")
    assert content_type == "application/json"
    assert json.loads(body) == {"inputs": [
        {"name": "X", "shape": [2, 3], "datatype": "FP32", "data": [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]},
        {"name": "T", "shape": [1, 1], "datatype": "BYTES", "data": ["caf\u00e9"]},
    ]}


def test_a_request_of_a_sequence_carries_its_parameters_in_both_bodies() -> None:
    """What a model with a sequence batcher needs of each request, in the JSON body and in the binary body's
    JSON header (the local replay on the real tritonserver sends them, tests/importer)."""
    inputs = {"X": np.arange(4, dtype=np.float32).reshape(1, 4)}
    wanted = {"sequence_id": 7, "sequence_start": True, "sequence_end": True}
    body, _ = json_request(inputs, sequence_parameters(7))
    assert json.loads(body)["parameters"] == wanted
    binary, content_type = binary_request(inputs, sequence_parameters(7))
    header_size = int(content_type.rsplit("=", 1)[1])
    assert json.loads(binary[:header_size])["parameters"] == {**wanted, "binary_data_output": True}
    assert "parameters" not in json.loads(json_request(inputs)[0])


def test_json_responses_as_triton_writes_them_become_arrays() -> None:
    answer = {"model_name": "e", "model_version": "1", "outputs": [
        {"name": "Y", "datatype": "INT64", "shape": [2, 2], "data": [1, 2, 3, 4]},
        {"name": "T", "datatype": "BYTES", "shape": [1, 1], "data": ["caf\u00e9"]},
    ]}
    back = parse_json_response(json.dumps(answer).encode())
    assert back["Y"].dtype == np.int64 and back["Y"].tolist() == [[1, 2], [3, 4]]
    assert back["T"].dtype == object and back["T"].tolist() == [[b"caf\xc3\xa9"]]


def test_binary_bodies_carry_any_bytes() -> None:
    body, content_type = encode_request({"T": np.array([[b"\x00\xff"]], dtype=object)}, "binary")
    assert content_type.startswith("application/vnd.sagemaker-triton.binary+json;json-header-size=")
    header_size = int(content_type.rsplit("=", 1)[1])
    assert json.loads(body[:header_size]) == {"inputs": [
        {"name": "T", "shape": [1, 1], "datatype": "BYTES", "parameters": {"binary_data_size": 6}}],
        "parameters": {"binary_data_output": True}}
    assert body[header_size:] == b"\x02\x00\x00\x00\x00\xff"  # the raw tensor after the header: length, then bytes
    with pytest.raises(ServeError, match=r"input 'T' holds non-UTF-8 bytes, which a JSON body cannot carry"):
        json_request({"T": np.array([[b"\x00\xff"]], dtype=object)})
    with pytest.raises(ServeError, match=r"is not a KServe v2 inference response"):
        parse_binary_response(b"nonsense", content_type)
    with pytest.raises(ServeError, match=r"\(application/vnd.sagemaker-triton.binary\+json;json-header-size=x\) "
                                         r"is not a KServe v2 inference response"):
        parse_binary_response(body, "application/vnd.sagemaker-triton.binary+json;json-header-size=x")


def test_unknown_body_kinds_and_json_request_checks() -> None:
    with pytest.raises(ValueError, match=r"body 'xml': use json or binary"):
        encode_request({}, "xml")
    assert check_json_request(b'{"inputs": []}') == b'{"inputs": []}'
    with pytest.raises(ValueError, match=r"no 'inputs' list"):
        check_json_request(b'{"outputs": []}')
    with pytest.raises(ValueError, match=r"not JSON"):
        check_json_request(b"{")
