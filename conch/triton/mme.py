"""A client of SageMaker's multi-model-endpoint contract as Triton's SageMaker front end serves it (routes,
headers and error answers from conch.triton.mme_contract, which the local MME's async hop shares), and of the
KServe HTTP endpoint (its route from conch.triton.kserve_routes): load and unload by archive, invoke with JSON
or binary+json bodies (encoded by conch.wire). Over one httpx.Client: its calls keep their connection alive."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

import httpx
import numpy as np

from conch.errors import InvokeError, ServeError
from conch.triton.http_client import sync_client
from conch.triton.kserve_routes import HEADER_LENGTH, infer_path, request_headers, response_content_type
from conch.triton.mme_contract import (
    MODELS,
    error_text,
    invoke_path,
    load_body,
    model_path,
    sequence_parameters,
    target_headers,
)
from conch.wire import (
    binary_request,
    json_request,
    parse_binary_response,
    parse_json_response,
)

UNLOAD_TIMEOUT_S = 360.0  # SageMaker's limit for an unload; Triton's front end waits up to 350 s for one to end
DYING_S = 2.0  # after a dropped or refused connection, how long a dying server may take to be seen exited


class Watched(Protocol):
    """The server a client talks to, when the client's owner started it (conch.triton.server.LocalTriton):
    asked, when a call finds no server, whether it has exited."""

    def lost(self, doing: str, wait: float = 0.0) -> ServeError | None: ...

    def attach(self, client: Any) -> None: ...


class MultiModelClient:
    """Talks to Triton's SageMaker front end the way the SageMaker MME platform does, over one kept-alive
    connection pool (``close`` or a ``with`` block ends it; so does dropping the client)."""

    def __init__(self, sagemaker_url: str, http_url: str, *, request_timeout: float = 120.0,
                 server: Watched | None = None) -> None:
        """``server``: the server behind the URLs, when the caller holds it: a call that finds it gone raises the
        error naming its death (``tritonserver exited (signal 11) while unloading ...``), not a connection
        error."""
        self.sagemaker_url = sagemaker_url.rstrip("/")
        self.http_url = http_url.rstrip("/")
        self.request_timeout = request_timeout
        self.server = server
        self.http = sync_client(self.sagemaker_url, self.http_url, timeout=request_timeout)
        # the pool closes with the client, whoever holds it (replay, profile and tune keep one per server)
        self._closed = weakref.finalize(self, self.http.close)
        if server is not None:  # closed before that server stops, whoever holds it
            server.attach(self)

    def close(self) -> None:
        self._closed()

    def __enter__(self) -> MultiModelClient:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    def load(self, target_model: str, folder: Path, timeout: float) -> None:
        """``POST /models``: register the unpacked archive and load its ensemble as ``target_model``."""
        try:
            response = self._call(f"loading {target_model!r}", lambda: self.http.post(
                f"{self.sagemaker_url}{MODELS}",
                json=load_body(target_model, folder),
                headers=target_headers(target_model),
                timeout=timeout,
            ))
        except httpx.TimeoutException:
            raise ServeError(
                f"loading {target_model!r} did not finish within {timeout:.0f} s (a Python-backend load can hang, "
                "e.g. on a Python version mismatch in its environment)"
            ) from None
        if response.status_code != 200:
            raise ServeError(
                f"loading {target_model!r} failed (HTTP {response.status_code}): {_error_text(response)}"
            )

    def unload(self, target_model: str, timeout: float = UNLOAD_TIMEOUT_S) -> None:
        """``DELETE /models/<hash>``: unload the archive's models and wait until Triton has, as SageMaker waits
        (360 s). A caller that gives up sooner leaves the unload running in the server: in Triton 2.51 a load
        sent meanwhile races it (docs/testing.md)."""
        try:
            response = self._call(f"unloading {target_model!r}", lambda: self.http.delete(
                f"{self.sagemaker_url}{model_path(target_model)}",
                headers=target_headers(target_model),
                timeout=timeout,
            ))
        except httpx.TimeoutException:
            raise ServeError(f"unloading {target_model!r} did not finish within {timeout:.0f} s; the server goes on "
                             "unloading it") from None
        if response.status_code != 200:
            raise ServeError(
                f"unloading {target_model!r} failed (HTTP {response.status_code}): {_error_text(response)}"
            )

    def describe(self, target_model: str) -> dict[str, Any] | None:
        """``GET /models/<hash>``: the loaded archive's name and folder, or None if it is not loaded."""
        response = self._call(f"describing {target_model!r}",
                              lambda: self.http.get(f"{self.sagemaker_url}{model_path(target_model)}"))
        if response.status_code == 404:
            return None
        response.raise_for_status()
        found: dict[str, Any] = response.json()
        return found

    def invoke_json(self, target_model: str, inputs: Mapping[str, np.ndarray], *,
                    sequence_id: int = 0) -> dict[str, np.ndarray]:
        """``POST /models/<hash>/invoke`` with a KServe v2 JSON body; ``sequence_id``: send the request as a
        sequence of one with that correlation ID (a model with a sequence batcher refuses requests without)."""
        response = self._invoke(target_model, *json_request(inputs, _sequence(sequence_id)))
        return parse_json_response(response.content)

    def invoke_binary(self, target_model: str, inputs: Mapping[str, np.ndarray], *,
                      sequence_id: int = 0) -> dict[str, np.ndarray]:
        """``POST /models/<hash>/invoke`` with a binary+json body (JSON header, then raw tensors)."""
        response = self._invoke(target_model, *binary_request(inputs, _sequence(sequence_id)))
        return parse_binary_response(response.content, response.headers.get("Content-Type", ""))

    def _invoke(self, target_model: str, body: bytes, content_type: str) -> httpx.Response:
        return self._post(target_model, f"{self.sagemaker_url}{invoke_path(target_model)}", body,
                          target_headers(target_model, content_type))

    def invoke_kserve(self, model: str, inputs: Mapping[str, np.ndarray], *,
                      sequence_id: int = 0) -> dict[str, np.ndarray]:
        """The same model through the KServe v2 HTTP endpoint (binary tensors), at the route Triton's HTTP front
        matches (conch.triton.kserve_routes: the name as it is; tritonclient escapes it, and Triton looks the
        escaped name up)."""
        path = infer_path(model)
        body, content_type = binary_request(inputs, _sequence(sequence_id))
        response = self._post(model, f"{self.http_url}{path}", body, request_headers(content_type))
        return parse_binary_response(response.content, response_content_type(response.headers.get(HEADER_LENGTH)))

    def _post(self, model: str, url: str, body: bytes, headers: Mapping[str, str]) -> httpx.Response:
        """One inference request; InvokeError with Triton's message (and status) when it is not answered 200."""
        try:
            response = self._call(f"invoking {model!r}", lambda: self.http.post(url, content=body, headers=headers))
        except httpx.TimeoutException:
            raise InvokeError(f"{model!r} did not answer within {self.request_timeout:.0f} s") from None
        if response.status_code != 200:
            raise InvokeError(_error_text(response), response.status_code)
        return response

    def _call(self, doing: str, send: Callable[[], httpx.Response]) -> httpx.Response:
        """``send()``; when it fails for want of a server (refused, dropped, timed out) and the server behind the
        URLs has exited, the error naming that instead (the caller handles every other failure)."""
        try:
            return send()
        except httpx.TransportError as exc:
            if self.server is not None:
                timed_out = isinstance(exc, httpx.TimeoutException)
                gone = self.server.lost(doing, wait=0.0 if timed_out else DYING_S)
                if gone is not None:
                    raise gone from None
            raise


def _sequence(sequence_id: int) -> dict[str, Any] | None:
    """A request's parameters as a sequence of one with correlation ID ``sequence_id`` (0: none)."""
    return sequence_parameters(sequence_id) if sequence_id else None


def _error_text(response: httpx.Response) -> str:
    return error_text(response.content, response.reason_phrase)
