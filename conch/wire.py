"""The KServe v2 / SageMaker Triton wire format, one place for every client (the local replay, the
SageMaker invoke, the load generator): JSON and binary+json request bodies (BYTES tensors included) and
the parsing of responses into numpy arrays."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from conch.ensembles.dtypes import DType
from conch.ensembles.payloads import HEADER_SIZE, decode_tensor
from conch.errors import ServeError

BINARY_CONTENT_TYPE = f"application/vnd.sagemaker-triton.binary+json;{HEADER_SIZE}"
TARGET_HEADER = "X-Amzn-SageMaker-Target-Model"
# InvokeEndpoint's InferenceComponentName travels in this header (botocore's sagemaker-runtime service model)
COMPONENT_HEADER = "X-Amzn-SageMaker-Inference-Component"
MAX_BODY_BYTES = 6 * 1024 * 1024  # InvokeEndpoint takes request bodies up to 6 MB (6,291,456 bytes)
BODIES = ("json", "binary")  # KServe v2 JSON, or binary+json (a JSON header, then the raw tensors)
# Where a replay sends each sample: Triton's KServe v2 endpoint, or its SageMaker front end with either body.
ENDPOINTS = ("kserve", "sagemaker-json", "sagemaker-binary")
# Datatypes Triton's JSON bodies cannot carry, either way: server v2.51.0 src/http_server.cc, ReadDataFromJson
# ("receiving FP16 data via JSON is not supported", likewise BF16) for inputs and WriteDataToJson ("sending FP16
# data via JSON is not supported", likewise BF16) for outputs; the SageMaker front end parses bodies with the same
# code. Such tensors travel only in binary+json bodies.
JSON_REFUSED = ("FP16", "BF16")


def component_name(endpoint: str, archive: str) -> str:
    """An archive's inference component on ``endpoint``: ``<endpoint>-<archive stem>``, in the letters SageMaker
    takes (63 at most); `conch deploy --components` and `conch serve --components` name them alike."""
    stem = archive[: -len(".tar.gz")] if archive.endswith(".tar.gz") else archive
    stem = re.sub(r"[^a-zA-Z0-9-]+", "-", stem).strip("-")
    return f"{endpoint}-{stem}"[:63].rstrip("-")


def json_refusal(tensors: Iterable[tuple[str, str, str]]) -> str | None:
    """Why a JSON body cannot carry these ensemble tensors ((kind, name, KServe datatype), kind being input or
    output), or None when it can."""
    refused = [f"{kind} {name!r} is {datatype}" for kind, name, datatype in tensors
               if datatype.upper().removeprefix("TYPE_") in JSON_REFUSED]
    if not refused:
        return None
    return (f"{', '.join(refused)}: Triton's JSON bodies cannot carry {' or '.join(JSON_REFUSED)} (its HTTP front "
            "end answers 400 'sending FP16 data via JSON is not supported'); callers must send binary+json bodies "
            f"({BINARY_CONTENT_TYPE}N)")


def encode_request(inputs: Mapping[str, np.ndarray], body: str) -> tuple[bytes, str]:
    """(body, content type) of a ``json`` or ``binary`` request; ValueError for another kind."""
    if body not in BODIES:
        raise ValueError(f"body {body!r}: use {' or '.join(BODIES)}")
    return json_request(inputs) if body == "json" else binary_request(inputs)


def parse_response(content: bytes, content_type: str, body: str) -> dict[str, np.ndarray]:
    """The output tensors of a response to a ``json`` or ``binary`` request."""
    return parse_json_response(content) if body == "json" else parse_binary_response(content, content_type)


def json_request(inputs: Mapping[str, np.ndarray],
                 parameters: Mapping[str, Any] | None = None) -> tuple[bytes, str]:
    """(body, content type) of a KServe v2 JSON request, as SageMaker's Triton front end takes it;
    ``parameters``: the request's (e.g. its sequence's, conch.triton.mme_contract.sequence_parameters)."""
    body: dict[str, Any] = {"inputs": [json_tensor(name, array) for name, array in inputs.items()]}
    if parameters:
        body["parameters"] = dict(parameters)
    return json.dumps(body).encode(), "application/json"


def binary_request(inputs: Mapping[str, np.ndarray],
                   parameters: Mapping[str, Any] | None = None) -> tuple[bytes, str]:
    """(body, content type) of a binary+json request: the JSON header, then the raw tensors; ``parameters``
    as for :func:`json_request` (tritonclient's names: sequence_id, sequence_start, sequence_end, priority...)."""
    import tritonclient.http as httpclient

    infer_inputs = []
    for name, array in inputs.items():  # each as binary data
        infer_inputs.append(httpclient.InferInput(name, list(array.shape), DType.of(array.dtype).wire))
        infer_inputs[-1].set_data_from_numpy(array, binary_data=True)
    body, header_length = httpclient.InferenceServerClient.generate_request_body(infer_inputs, **(parameters or {}))
    content_type = "application/json" if header_length is None else f"{BINARY_CONTENT_TYPE}{header_length}"
    return body, content_type


def parse_json_response(content: bytes) -> dict[str, np.ndarray]:
    """The outputs of a KServe v2 JSON response."""
    try:
        body = json.loads(content)
        return {str(o["name"]): decode_tensor(o) for o in body.get("outputs", [])}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ServeError(f"the answer is not a KServe v2 JSON inference response ({exc}): {_head(content)}") from None


def parse_binary_response(content: bytes, content_type: str) -> dict[str, np.ndarray]:
    """The outputs of a binary+json response (or of a JSON one, when the server answered in JSON)."""
    import tritonclient.http as httpclient

    try:
        header = int(content_type[len(BINARY_CONTENT_TYPE):]) if content_type.startswith(BINARY_CONTENT_TYPE) else None
        result = httpclient.InferenceServerClient.parse_response_body(content, header_length=header)
        return {o["name"]: result.as_numpy(o["name"]) for o in result.get_response()["outputs"]}
    except Exception as exc:  # tritonclient raises whatever its JSON and buffer handling raise
        raise ServeError(
            f"the answer ({content_type or 'no content type'}) is not a KServe v2 inference response ({exc}): "
            f"{_head(content)}"
        ) from None


def _head(content: bytes, limit: int = 80) -> str:
    text = content[:limit].decode("utf-8", "replace")
    return repr(text + ("..." if len(content) > limit else ""))


def json_tensor(name: str, array: np.ndarray) -> dict[str, Any]:
    """``array`` as a KServe v2 JSON body carries it; ServeError for BYTES that are not UTF-8."""
    dtype = DType.of(array.dtype)
    if dtype is DType.BYTES:
        try:
            data: list[Any] = [v.decode() if isinstance(v, bytes) else str(v) for v in array.ravel()]
        except UnicodeDecodeError:
            raise ServeError(f"input {name!r} holds non-UTF-8 bytes, which a JSON body cannot carry") from None
    else:
        data = array.ravel().tolist()
    return {"name": name, "shape": list(array.shape), "datatype": dtype.wire, "data": data}
