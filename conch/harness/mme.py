"""A client of SageMaker's multi-model-endpoint contract as Triton's SageMaker front end serves it, and
of the KServe HTTP endpoint: load and unload by archive, invoke with JSON or binary+json bodies."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import requests
import tritonclient.http as httpclient

from conch.ensembles.dtypes import DType
from conch.errors import ServeError

BINARY_CONTENT_TYPE = "application/vnd.sagemaker-triton.binary+json;json-header-size="
TARGET_HEADER = "X-Amzn-SageMaker-Target-Model"


def model_hash(target_model: str) -> str:
    """SageMaker addresses a loaded archive by a hash of its name; the header carries the name."""
    return hashlib.sha256(target_model.encode()).hexdigest()[:32]


class InvokeError(ServeError):
    """The server answered an inference request with an error."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class MultiModelClient:
    """Talks to Triton's SageMaker front end the way the SageMaker MME platform does."""

    def __init__(self, sagemaker_url: str, http_url: str, *, request_timeout: float = 120.0) -> None:
        self.sagemaker_url = sagemaker_url.rstrip("/")
        self.http_url = http_url.rstrip("/")
        self.request_timeout = request_timeout

    def load(self, target_model: str, folder: Path, timeout: float) -> None:
        """``POST /models``: register the unpacked archive and load its ensemble as ``target_model``."""
        try:
            response = requests.post(
                f"{self.sagemaker_url}/models",
                json={"model_name": model_hash(target_model), "url": str(folder)},
                headers={TARGET_HEADER: target_model},
                timeout=timeout,
            )
        except requests.Timeout:
            raise ServeError(
                f"loading {target_model!r} did not finish within {timeout:.0f} s (a Python-backend load can hang, "
                "e.g. on a Python version mismatch in its environment)"
            ) from None
        if response.status_code != 200:
            raise ServeError(
                f"loading {target_model!r} failed (HTTP {response.status_code}): {_error_text(response)}"
            )

    def unload(self, target_model: str, timeout: float = 60.0) -> None:
        response = requests.delete(
            f"{self.sagemaker_url}/models/{model_hash(target_model)}",
            headers={TARGET_HEADER: target_model},
            timeout=timeout,
        )
        if response.status_code != 200:
            raise ServeError(
                f"unloading {target_model!r} failed (HTTP {response.status_code}): {_error_text(response)}"
            )

    def list_models(self) -> list[dict[str, Any]]:
        """``GET /models``. Triton 2.51 checks readiness under the hash, not the TargetModel name the
        ensemble was loaded as, so archives loaded with a TargetModel header are not listed."""
        response = requests.get(f"{self.sagemaker_url}/models", timeout=self.request_timeout)
        response.raise_for_status()
        models: list[dict[str, Any]] = response.json().get("models", [])
        return [m for m in models if m]

    def describe(self, target_model: str) -> dict[str, Any] | None:
        """``GET /models/<hash>``: the loaded archive's name and folder, or None if it is not loaded."""
        response = requests.get(f"{self.sagemaker_url}/models/{model_hash(target_model)}", timeout=self.request_timeout)
        if response.status_code == 404:
            return None
        response.raise_for_status()
        found: dict[str, Any] = response.json()
        return found

    def invoke_json(self, target_model: str, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """``POST /models/<hash>/invoke`` with a KServe v2 JSON body."""
        response = self._invoke(target_model, *json_request(inputs))
        return parse_json_response(response.content)

    def invoke_binary(self, target_model: str, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """``POST /models/<hash>/invoke`` with a binary+json body (JSON header, then raw tensors)."""
        response = self._invoke(target_model, *binary_request(inputs))
        return parse_binary_response(response.content, response.headers.get("Content-Type", ""))

    def _invoke(self, target_model: str, body: bytes, content_type: str) -> requests.Response:
        try:
            response = requests.post(
                f"{self.sagemaker_url}/models/{model_hash(target_model)}/invoke",
                data=body,
                headers={"Content-Type": content_type, TARGET_HEADER: target_model},
                timeout=self.request_timeout,
            )
        except requests.Timeout:
            raise InvokeError(f"{target_model!r} did not answer within {self.request_timeout:.0f} s") from None
        if response.status_code != 200:
            raise InvokeError(_error_text(response), response.status_code)
        return response

    def invoke_kserve(self, model: str, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The same model through the KServe v2 HTTP endpoint, with tritonclient (binary tensors)."""
        address = self.http_url.split("://", 1)[-1]
        client = httpclient.InferenceServerClient(address, network_timeout=self.request_timeout,
                                                  connection_timeout=self.request_timeout)
        try:
            infer_inputs = [_infer_input(name, array) for name, array in inputs.items()]
            result = client.infer(model, infer_inputs)
        except Exception as exc:  # tritonclient raises its own InferenceServerException
            raise InvokeError(str(exc)) from exc
        finally:
            client.close()
        return {o["name"]: result.as_numpy(o["name"]) for o in result.get_response()["outputs"]}


def json_request(inputs: Mapping[str, np.ndarray]) -> tuple[bytes, str]:
    """(body, content type) of a KServe v2 JSON request, as SageMaker's Triton front end takes it."""
    body = {"inputs": [_json_tensor(name, array) for name, array in inputs.items()]}
    return json.dumps(body).encode(), "application/json"


def binary_request(inputs: Mapping[str, np.ndarray]) -> tuple[bytes, str]:
    """(body, content type) of a binary+json request: the JSON header, then the raw tensors."""
    infer_inputs = [_infer_input(name, array) for name, array in inputs.items()]
    body, header_length = httpclient.InferenceServerClient.generate_request_body(infer_inputs)
    content_type = "application/json" if header_length is None else f"{BINARY_CONTENT_TYPE}{header_length}"
    return body, content_type


def parse_json_response(content: bytes) -> dict[str, np.ndarray]:
    """The outputs of a KServe v2 JSON response."""
    try:
        body = json.loads(content)
        return _parse_json_outputs(body)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ServeError(f"the answer is not a KServe v2 JSON inference response ({exc}): {_head(content)}") from None


def parse_binary_response(content: bytes, content_type: str) -> dict[str, np.ndarray]:
    """The outputs of a binary+json response (or of a JSON one, when the server answered in JSON)."""
    header = None
    if content_type.startswith(BINARY_CONTENT_TYPE):
        header = int(content_type[len(BINARY_CONTENT_TYPE):])
    try:
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


def _error_text(response: requests.Response) -> str:
    try:
        return str(response.json().get("error", response.text))
    except ValueError:
        return response.text or response.reason


def _infer_input(name: str, array: np.ndarray) -> httpclient.InferInput:
    dtype = DType.of(array.dtype)
    item = httpclient.InferInput(name, list(array.shape), dtype.wire)
    item.set_data_from_numpy(array, binary_data=True)
    return item


def _json_tensor(name: str, array: np.ndarray) -> dict[str, Any]:
    dtype = DType.of(array.dtype)
    if dtype is DType.BYTES:
        try:
            data: list[Any] = [v.decode() if isinstance(v, bytes) else str(v) for v in array.ravel()]
        except UnicodeDecodeError:
            raise ServeError(f"input {name!r} holds non-UTF-8 bytes, which a JSON body cannot carry") from None
    else:
        data = array.ravel().tolist()
    return {"name": name, "shape": list(array.shape), "datatype": dtype.wire, "data": data}


def _parse_json_outputs(body: Mapping[str, Any]) -> dict[str, np.ndarray]:
    outputs = {}
    for o in body.get("outputs", []):
        dtype = DType.of(o["datatype"])
        if dtype is DType.BYTES:
            arr = np.array([s.encode() if isinstance(s, str) else s for s in o["data"]], dtype=object)
        else:
            arr = np.array(o["data"], dtype=dtype.numpy)
        outputs[o["name"]] = arr.reshape(o["shape"])
    return outputs
