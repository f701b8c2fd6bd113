"""The KServe v2 / SageMaker wire format every client shares: requests encode BYTES and numbers exactly as
the parsers read them back, and a JSON request body is checked before it is sent."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conch.errors import ServeError
from conch.wire import check_json_request, encode_request, json_request, parse_binary_response, parse_json_response


def _as_response(body: bytes) -> bytes:
    """A request body turned into the response a server would send back with the same tensors."""
    request = json.loads(body)
    return json.dumps({"outputs": request["inputs"]}).encode()


def test_json_bodies_carry_numbers_and_utf8_bytes() -> None:
    inputs = {"X": np.arange(6, dtype=np.float32).reshape(2, 3), "T": np.array([[b"caf\xc3\xa9"]], dtype=object)}
    body, content_type = encode_request(inputs, "json")
    assert content_type == "application/json"
    back = parse_json_response(_as_response(body))
    np.testing.assert_array_equal(back["X"], inputs["X"])
    assert back["X"].dtype == np.float32 and back["T"].tolist() == [[b"caf\xc3\xa9"]]


def test_binary_bodies_carry_any_bytes() -> None:
    body, content_type = encode_request({"T": np.array([[b"\x00\xff"]], dtype=object)}, "binary")
    assert content_type.startswith("application/vnd.sagemaker-triton.binary+json;json-header-size=")
    assert body.endswith(b"\x02\x00\x00\x00\x00\xff")  # the raw tensor after the header: length, then bytes
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
