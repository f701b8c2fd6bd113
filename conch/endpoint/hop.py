"""The hop from the front to Triton's SageMaker front end: the calls the SageMaker platform makes to the
container (``POST /models``, ``DELETE /models/<hash>``, ``POST /models/<hash>/invoke``, as
conch.triton.mme_contract spells them for the sync client too), through aiohttp's client and its pool (a C
parser: the invocation hop is the path users wait on; benchmarks/RESULTS.md, issue 31).

An invocation is written to Triton at most once: aiohttp's client sends a request again after a kept connection
drops only for idempotent methods (``IDEMPOTENT_METHODS`` in aiohttp/client.py, read in 3.14.5; POST is not one),
and this hop never sends one again itself. A connection that drops after the request was written, or a kept one
that Triton closed just before it, fails the call."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from yarl import URL

from conch.triton.mme_contract import MODELS, error_text, invoke_path, load_body, model_path, target_headers
from conch.wire import MAX_BODY_BYTES

UNLOAD_TIMEOUT_S = 360.0  # SageMaker waits this long for an unload; Triton's front end gives up at 350 s
# SageMaker answers every invocation within 60 s (botocore's InvokeEndpoint documentation; AWS "Invoke a
# Multi-Model Endpoint"); the front passes each call what is left of it
INVOKE_TIMEOUT_S = 60.0
OPEN = 64  # invocations in flight to Triton at once (one connection each, kept alive); more wait for a place
IDLE_S = 30.0  # a kept connection idle this long is closed
SHUT = "the connections to this tritonserver were closed (it exited or is being restarted) before a free one came"
# aiohttp asks for gzip and deflate by default; Triton's SageMaker front end answers plain bytes, and the hop
# passes them on as they came (no decompression either)
SKIPPED = ("Accept-Encoding",)


class HopError(Exception):
    """Triton did not answer: the connection failed or dropped, or the hop was closed (the front answers 5XX)."""


class HopTimeout(HopError):
    """No answer within the call's limit."""


class AnswerTooLarge(HopError):
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
    """One tritonserver's invocation client: aiohttp's pool behind a gate of ``OPEN`` places, so that a call
    waiting for a place fails at once when the server is gone (``close``) instead of opening a connection to its
    old port (which a restarted server, or anything else, may hold now). Made on the loop that uses it."""

    def __init__(self) -> None:
        # no timeouts of aiohttp's: ``TritonHop.invoke`` holds each call to one deadline, whatever it waits on
        self.session = _session(OPEN, aiohttp.ClientTimeout(total=None))
        self.places = asyncio.Semaphore(OPEN)
        self.shut = False

    async def call(self, url: URL, headers: dict[str, str], body: bytes, limit: int) -> Answer:
        async with self.places:
            if self.shut:
                raise HopError(SHUT)
            try:
                async with self.session.post(url, data=body, headers=headers) as response:
                    declared = response.content_length
                    if declared is not None and declared > limit:
                        response.close()  # the body is not read: its connection goes
                        raise AnswerTooLarge(declared, True, response.status, limit)
                    chunks, size = [], 0
                    async for chunk in response.content.iter_any():
                        size += len(chunk)
                        if size > limit:
                            response.close()
                            raise AnswerTooLarge(size, False, response.status, limit)
                        chunks.append(chunk)
                    content_type = response.headers.get("Content-Type", "")
            except aiohttp.ClientError as exc:
                raise HopError(_said(exc)) from exc
        content = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        return Answer(response.status, content, content_type)

    async def close(self) -> None:
        """Calls waiting for a place fail now (``SHUT``); calls under way fail as their connections close."""
        self.shut = True
        self.places.release()  # wakes one waiting call, which sees ``shut`` and passes its place on as it leaves
        await self.session.close()


class TritonHop:
    """Async client of one tritonserver's SageMaker front end; made on the event loop that uses it."""

    def __init__(self, sagemaker_url: str, log_path: Path | None = None) -> None:
        self.log_path = log_path
        self.url = sagemaker_url.rstrip("/")
        self.sagemaker = _session(OPEN, aiohttp.ClientTimeout(total=INVOKE_TIMEOUT_S))  # loads, unloads, lookups
        self._invocations = Invocations()
        # per TargetModel and Content-Type: the invoke URL and headers, made once
        self._calls: dict[tuple[str, str], tuple[URL, dict[str, str]]] = {}

    async def rebind(self, sagemaker_url: str) -> None:
        """Talk to a restarted server (on new ports) from now on."""
        self.url = sagemaker_url.rstrip("/")
        self._calls.clear()
        old, self._invocations = self._invocations, Invocations()
        await old.close()

    async def close(self) -> None:
        await self._invocations.close()
        await self.sagemaker.close()

    async def load(self, target_model: str, folder: Path, timeout: float) -> Answer:
        """Register and load the unpacked archive; HopTimeout past ``timeout``."""
        return await self._admin("POST", MODELS, timeout, json=load_body(target_model, folder),
                                 headers=target_headers(target_model))

    async def unload(self, target_model: str) -> Answer:
        return await self._admin("DELETE", model_path(target_model), UNLOAD_TIMEOUT_S,
                                 headers=target_headers(target_model))

    async def registered(self, target_model: str) -> bool:
        """Whether the SageMaker front end lists the archive as loaded (``GET /models/<hash>``)."""
        return (await self._admin("GET", model_path(target_model), 30.0)).status == 200

    async def _admin(self, method: str, path: str, timeout: float, **options: Any) -> Answer:
        try:
            async with self.sagemaker.request(method, self.url + path, timeout=aiohttp.ClientTimeout(total=timeout),
                                              **options) as r:
                return Answer(r.status, await r.read(), r.headers.get("Content-Type", ""))
        except asyncio.TimeoutError:
            raise HopTimeout(f"no answer within {timeout:g} s") from None
        except aiohttp.ClientError as exc:
            raise HopError(_said(exc)) from exc

    async def invoke(self, target_model: str, body: bytes, content_type: str,
                     timeout: float | None = None) -> Answer:
        """Triton's answer; HopTimeout past ``timeout`` (default INVOKE_TIMEOUT_S) whatever the call waited on (a
        place, a connection, the answer), another HopError when it does not answer (``AnswerTooLarge`` past
        SageMaker's size). Sent at most once."""
        url, headers = self._call(target_model, content_type)
        limit = INVOKE_TIMEOUT_S if timeout is None else timeout
        try:
            return await asyncio.wait_for(self._invocations.call(url, headers, body, MAX_BODY_BYTES), limit)
        except asyncio.TimeoutError:
            raise HopTimeout(f"no answer within {limit:g} s") from None

    def _call(self, target_model: str, content_type: str) -> tuple[URL, dict[str, str]]:
        key = (target_model, content_type)
        call = self._calls.get(key)
        if call is None:
            if any((ord(c) < 0x20 and c != "\t") or ord(c) == 0x7F for c in target_model + content_type):
                raise ValueError(f"TargetModel {target_model!r} or Content-Type {content_type!r}: control characters "
                                 "cannot go into an HTTP header")
            if len(self._calls) >= _CALLS_KEPT:  # names callers made up must not grow it without end
                self._calls.clear()
            headers = {name: _as_sent(value) for name, value in target_headers(target_model, content_type).items()}
            call = self._calls[key] = (URL(f"{self.url}{invoke_path(target_model)}", encoded=True), headers)
        return call

    def unreachable(self, target_model: str, exc: HopError) -> str:
        """What to tell a caller when tritonserver did not answer at all."""
        log = f"; its log: {self.log_path}" if self.log_path else ""
        cause = type(exc.__cause__ or exc).__name__
        return (f"TargetModel {target_model!r}: tritonserver did not answer ({cause}: {exc}); it may have "
                f"exited or stalled{log}")


def _session(limit: int, timeout: aiohttp.ClientTimeout) -> aiohttp.ClientSession:
    """An aiohttp session of tritonserver's SageMaker port: plain HTTP on loopback, up to ``limit`` connections,
    each kept alive ``IDLE_S`` when idle; no cookies kept (the platform keeps none), bodies passed on undecoded."""
    connector = aiohttp.TCPConnector(limit=limit, keepalive_timeout=IDLE_S)
    return aiohttp.ClientSession(connector=connector, timeout=timeout, skip_auto_headers=SKIPPED,
                                 auto_decompress=False, cookie_jar=aiohttp.DummyCookieJar())


def _said(exc: aiohttp.ClientError) -> str:
    return str(exc) or type(exc).__name__


_CALLS_KEPT = 4096  # (TargetModel, Content-Type) pairs whose URL and headers are kept


def _as_sent(text: str) -> str:
    """A header value whose UTF-8 bytes (what aiohttp writes) are the caller's (the front decoded them as
    latin-1) when those bytes are UTF-8; other text as it is."""
    try:
        return text.encode("latin-1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        return text
