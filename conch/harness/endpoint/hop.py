"""The hop from the front to Triton's SageMaker front end: the calls the SageMaker platform makes to the
container (``POST /models``, ``DELETE /models/<hash>``, ``POST /models/<hash>/invoke``, as
conch.harness.mme_contract spells them for the sync client too). Loads and unloads go through httpx;
invocations, the hot path, through kept-alive connections whose answers httptools' parser reads
(``keepalive.py``), with each TargetModel's request head made once (httpx cost ~1 ms per call, aiohttp's
client ~0.12 ms: benchmarks/RESULTS.md, issue 23)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from conch.harness.endpoint.keepalive import OPEN, Pool
from conch.harness.mme_contract import MODELS, error_text, invoke_path, load_body, model_path, target_headers

UNLOAD_TIMEOUT_S = 360.0  # SageMaker waits this long for an unload; Triton's front end gives up at 350 s
# SageMaker answers every invocation within 60 s (botocore's InvokeEndpoint documentation; AWS "Invoke a
# Multi-Model Endpoint"); the front passes each call what is left of it
INVOKE_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Answer:
    status: int
    content: bytes
    content_type: str

    def error_text(self) -> str:
        """Triton's ``{"error": ...}`` message, or the raw body."""
        return error_text(self.content, f"HTTP {self.status}")


class TritonHop:
    """Async client of one tritonserver's SageMaker front end. ``resent``: called for each invocation sent on
    another connection because the kept one it took was already closed (nothing of it had been written)."""

    def __init__(self, sagemaker_url: str, log_path: Path | None = None,
                 resent: Callable[[], object] = lambda: None) -> None:
        self.log_path = log_path
        self.resent = resent
        limits = httpx.Limits(max_connections=OPEN, max_keepalive_connections=32)
        self.sagemaker = httpx.AsyncClient(base_url=sagemaker_url, limits=limits, timeout=INVOKE_TIMEOUT_S)
        self._url = sagemaker_url.rstrip("/")
        self._pool: Pool | None = None  # made on first use, inside the running loop
        # per TargetModel and Content-Type: the invoke URL and headers, and the request head, made once
        self._calls: dict[tuple[str, str], tuple[str, dict[str, str]]] = {}
        self._heads: dict[tuple[str, str], bytes] = {}

    async def rebind(self, sagemaker_url: str) -> None:
        """Talk to a restarted server (on new ports) from now on."""
        self.sagemaker.base_url = httpx.URL(sagemaker_url)
        self._url = sagemaker_url.rstrip("/")
        self._calls.clear()
        self._heads.clear()
        self._close_invocations()

    async def close(self) -> None:
        self._close_invocations()
        await self.sagemaker.aclose()

    def _close_invocations(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    def _connections(self) -> Pool:
        if self._pool is None:
            url = urlsplit(self._url)
            self._pool = Pool(url.hostname or "127.0.0.1", url.port or 80, self.resent)
        return self._pool

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
        """Triton's answer; httpx.TimeoutException past ``timeout`` (default INVOKE_TIMEOUT_S), another
        httpx.HTTPError when it does not answer (``keepalive.AnswerTooLarge`` past SageMaker's size), as the
        httpx client raised, so callers keep one contract. Sent once: a connection that drops after the request
        was written is an error, not a second try."""
        head = self._heads.get((target_model, content_type)) or self._head(target_model, content_type)
        pool = self._pool or self._connections()
        loop = pool.loop
        limit = INVOKE_TIMEOUT_S if timeout is None else timeout
        deadline = loop.time() + limit
        conn = None
        try:
            conn, _ = await pool.take(deadline)
            size = len(body)
            if size <= _JOINED:
                answer = conn.send(b"%s%d\r\n\r\n%s" % (head, size, body), b"")
            else:
                answer = conn.send(b"%s%d\r\n\r\n" % (head, size), body)
            deadlines = pool.deadlines  # one loop timer for every call's deadline, not one per call
            deadlines.add(conn, deadline, conn.timed_out)
            try:
                status, content, kind = await answer
            finally:
                deadlines.discard(conn)
        except asyncio.TimeoutError:
            raise httpx.ReadTimeout(f"no answer within {limit:g} s") from None
        except BaseException:
            if conn is not None:
                conn.close()  # it may still owe (part of) an answer
            raise
        pool.give(conn)
        return Answer(status, content, kind)

    def _head(self, target_model: str, content_type: str) -> bytes:
        url, headers = self._call(target_model, content_type)
        if len(self._heads) >= _CALLS_KEPT:
            self._heads.clear()
        parts = urlsplit(url)
        lines = [f"POST {parts.path} HTTP/1.1", f"Host: {parts.netloc}",
                 *(f"{name}: {value}" for name, value in headers.items()), "Content-Length: "]
        text = "\r\n".join(lines)
        if any((ord(c) < 0x20 and c != "\t") or ord(c) == 0x7F for c in target_model + content_type):
            raise ValueError(f"TargetModel {target_model!r} or Content-Type {content_type!r}: control characters "
                             "cannot go into an HTTP header")
        head = self._heads[(target_model, content_type)] = _latin1_or_utf8(text)
        return head

    def _call(self, target_model: str, content_type: str) -> tuple[str, dict[str, str]]:
        key = (target_model, content_type)
        call = self._calls.get(key)
        if call is None:
            if len(self._calls) >= _CALLS_KEPT:  # names callers made up must not grow it without end
                self._calls.clear()
            call = self._calls[key] = (f"{self._url}{invoke_path(target_model)}",
                                       target_headers(target_model, content_type))
        return call

    def unreachable(self, target_model: str, exc: httpx.HTTPError) -> str:
        """What to tell a caller when tritonserver did not answer at all."""
        log = f"; its log: {self.log_path}" if self.log_path else ""
        return (f"TargetModel {target_model!r}: tritonserver did not answer ({type(exc).__name__}: {exc}); it may have "
                f"exited or stalled{log}")


_CALLS_KEPT = 4096  # (TargetModel, Content-Type) pairs whose URL, headers and request head are kept
_JOINED = 64 * 1024  # bodies up to this size go out in one buffer with the head; larger ones as they are


def _latin1_or_utf8(text: str) -> bytes:
    """A header as the caller's bytes (the front decoded them as latin-1), or UTF-8 for other text."""
    try:
        return text.encode("latin-1")
    except UnicodeEncodeError:
        return text.encode("utf-8")
