"""The hop from the front to Triton's SageMaker front end: the calls the SageMaker platform makes to the
container (``POST /models``, ``DELETE /models/<hash>``, ``POST /models/<hash>/invoke``, as
conch.harness.mme_contract spells them for the sync client too), all through httpx's async client and its pool.

An invocation is written to Triton at most once: httpx's pool writes a request on one connection and never again
(a kept connection it finds closed or readable before the write is closed and another one used: nothing of the
call was sent, so that is no resend; ``AsyncHTTPTransport(retries=)``, 0 here, would only retry opening a
connection). A connection that drops after the request was written fails the call."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

import httpx

from conch.harness.mme_contract import MODELS, error_text, invoke_path, load_body, model_path, target_headers
from conch.wire import MAX_BODY_BYTES

UNLOAD_TIMEOUT_S = 360.0  # SageMaker waits this long for an unload; Triton's front end gives up at 350 s
# SageMaker answers every invocation within 60 s (botocore's InvokeEndpoint documentation; AWS "Invoke a
# Multi-Model Endpoint"); the front passes each call what is left of it
INVOKE_TIMEOUT_S = 60.0
OPEN = 64  # invocations in flight to Triton at once (one connection each); more wait for a place
KEPT = 32  # idle connections kept alive
IDLE_S = 30.0  # a kept connection idle this long is closed
SHUT = "the connections to this tritonserver were closed (it exited or is being restarted) before a free one came"


class AnswerTooLarge(httpx.HTTPError):
    """Triton's answer passed the size SageMaker passes on (``MAX_BODY_BYTES``); ``size``: what it said or sent."""

    def __init__(self, size: int, declared: bool, status: int, limit: int) -> None:
        how = "of" if declared else "past"
        super().__init__(f"HTTP {status} with a body {how} {size} bytes (at most {limit} pass)")
        self.size, self.status = size, status


@dataclass(frozen=True)
class Answer:
    status: int
    content: bytes
    content_type: str

    def error_text(self) -> str:
        """Triton's ``{"error": ...}`` message, or the raw body."""
        return error_text(self.content, f"HTTP {self.status}")


class Invocations:
    """One tritonserver's invocation client: httpx's pool behind a gate of ``OPEN`` places, so that a call waiting
    for a place fails at once when the server is gone (``close``) instead of opening a connection to its old port
    (which a restarted server, or anything else, may hold now)."""

    def __init__(self, url: str) -> None:
        # no timeouts of httpx's: ``TritonHop.invoke`` holds each call to one deadline, whatever it waits on
        self.client = _client(url, None)
        self.places = asyncio.Semaphore(OPEN)
        self.shut = False

    async def call(self, request: httpx.Request, limit: int) -> Answer:
        async with self.places:
            if self.shut:
                raise httpx.ConnectError(SHUT)
            response = await self.client.send(request, stream=True)
            try:
                declared = response.headers.get("content-length", "")
                if declared.isdigit() and int(declared) > limit:
                    raise AnswerTooLarge(int(declared), True, response.status_code, limit)
                chunks, size = [], 0
                async for chunk in response.aiter_raw():
                    size += len(chunk)
                    if size > limit:
                        raise AnswerTooLarge(size, False, response.status_code, limit)
                    chunks.append(chunk)
            finally:
                await response.aclose()  # an answer not read to its end closes its connection
        content = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        return Answer(response.status_code, content, response.headers.get("content-type", ""))

    async def close(self) -> None:
        """Calls waiting for a place fail now (``SHUT``); calls under way fail as their connections close."""
        self.shut = True
        self.places.release()  # wakes one waiting call, which sees ``shut`` and passes its place on as it leaves
        await self.client.aclose()


class TritonHop:
    """Async client of one tritonserver's SageMaker front end."""

    def __init__(self, sagemaker_url: str, log_path: Path | None = None) -> None:
        self.log_path = log_path
        self.sagemaker = _client(sagemaker_url, INVOKE_TIMEOUT_S)
        self._url = sagemaker_url.rstrip("/")
        self._invocations = Invocations(self._url)
        # per TargetModel and Content-Type: the invoke URL and headers, made once
        self._calls: dict[tuple[str, str], tuple[httpx.URL, list[tuple[bytes, bytes]]]] = {}

    async def rebind(self, sagemaker_url: str) -> None:
        """Talk to a restarted server (on new ports) from now on."""
        self.sagemaker.base_url = httpx.URL(sagemaker_url)
        self._url = sagemaker_url.rstrip("/")
        self._calls.clear()
        old, self._invocations = self._invocations, Invocations(self._url)
        await old.close()

    async def close(self) -> None:
        await self._invocations.close()
        await self.sagemaker.aclose()

    async def load(self, target_model: str, folder: Path, timeout: float) -> Answer:
        """Register and load the unpacked archive; raises httpx.TimeoutException past ``timeout``."""
        r = await self.sagemaker.post(MODELS, json=load_body(target_model, folder),
                                      headers=target_headers(target_model), timeout=timeout)
        return Answer(r.status_code, r.content, r.headers.get("content-type", ""))

    async def unload(self, target_model: str) -> Answer:
        r = await self.sagemaker.delete(model_path(target_model), headers=target_headers(target_model),
                                        timeout=UNLOAD_TIMEOUT_S)
        return Answer(r.status_code, r.content, r.headers.get("content-type", ""))

    async def registered(self, target_model: str) -> bool:
        """Whether the SageMaker front end lists the archive as loaded (``GET /models/<hash>``)."""
        r = await self.sagemaker.get(model_path(target_model), timeout=30.0)
        return r.status_code == 200

    async def invoke(self, target_model: str, body: bytes, content_type: str,
                     timeout: float | None = None) -> Answer:
        """Triton's answer; httpx.TimeoutException past ``timeout`` (default INVOKE_TIMEOUT_S) whatever the call
        waited on (a place, a connection, the answer), another httpx.HTTPError when it does not answer
        (``AnswerTooLarge`` past SageMaker's size). Sent at most once."""
        url, headers = self._call(target_model, content_type)
        invocations = self._invocations
        limit = INVOKE_TIMEOUT_S if timeout is None else timeout
        request = httpx.Request("POST", url, headers=headers, content=body)
        try:
            return await asyncio.wait_for(invocations.call(request, MAX_BODY_BYTES), limit)
        except asyncio.TimeoutError:
            raise httpx.ReadTimeout(f"no answer within {limit:g} s", request=request) from None

    def _call(self, target_model: str, content_type: str) -> tuple[httpx.URL, list[tuple[bytes, bytes]]]:
        key = (target_model, content_type)
        call = self._calls.get(key)
        if call is None:
            if any((ord(c) < 0x20 and c != "\t") or ord(c) == 0x7F for c in target_model + content_type):
                raise ValueError(f"TargetModel {target_model!r} or Content-Type {content_type!r}: control characters "
                                 "cannot go into an HTTP header")
            if len(self._calls) >= _CALLS_KEPT:  # names callers made up must not grow it without end
                self._calls.clear()
            headers = [(_latin1_or_utf8(name), _latin1_or_utf8(value))
                       for name, value in target_headers(target_model, content_type).items()]
            call = self._calls[key] = (httpx.URL(f"{self._url}{invoke_path(target_model)}"), headers)
        return call

    def unreachable(self, target_model: str, exc: httpx.HTTPError) -> str:
        """What to tell a caller when tritonserver did not answer at all."""
        log = f"; its log: {self.log_path}" if self.log_path else ""
        return (f"TargetModel {target_model!r}: tritonserver did not answer ({type(exc).__name__}: {exc}); it may have "
                f"exited or stalled{log}")


def _client(url: str, timeout: float | None) -> httpx.AsyncClient:
    """An httpx client of tritonserver's SageMaker port: plain HTTP on loopback, so no certificate store is loaded
    (``verify=True`` reads certifi's bundle, ~0.3 s, for every client made: one per restart)."""
    limits = httpx.Limits(max_connections=OPEN, max_keepalive_connections=KEPT, keepalive_expiry=IDLE_S)
    return httpx.AsyncClient(base_url=url, limits=limits, timeout=timeout, verify=False)


_CALLS_KEPT = 4096  # (TargetModel, Content-Type) pairs whose URL and headers are kept


def _latin1_or_utf8(text: str) -> bytes:
    """A header as the caller's bytes (the front decoded them as latin-1), or UTF-8 for other text."""
    try:
        return text.encode("latin-1")
    except UnicodeEncodeError:
        return text.encode("utf-8")
