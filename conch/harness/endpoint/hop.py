"""The hop from the front to Triton's SageMaker front end: the calls the SageMaker platform makes to the
container (``POST /models``, ``DELETE /models/<hash>``, ``POST /models/<hash>/invoke``). Loads and unloads
go through httpx; invocations, the hot path, through a few lines of HTTP/1.1 on kept-alive asyncio streams
(one write per request, no per-request client machinery: httpx cost ~1 ms per call, see benchmarks)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path

import httpx

from conch.harness.endpoint.protocol import TARGET_HEADER
from conch.harness.mme import model_hash

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
        try:
            return str(json.loads(self.content)["error"])
        except (ValueError, KeyError, TypeError):
            return self.content.decode("utf-8", "replace") or f"HTTP {self.status}"


class TritonHop:
    """Async client of one tritonserver's SageMaker front end."""

    def __init__(self, sagemaker_url: str, log_path: Path | None = None) -> None:
        self.log_path = log_path
        limits = httpx.Limits(max_connections=64, max_keepalive_connections=32)
        self.sagemaker = httpx.AsyncClient(base_url=sagemaker_url, limits=limits, timeout=INVOKE_TIMEOUT_S)
        self._invocations = _KeptAlive(sagemaker_url)

    def rebind(self, sagemaker_url: str) -> None:
        """Talk to a restarted server (on new ports) from now on."""
        self.sagemaker.base_url = httpx.URL(sagemaker_url)
        self._invocations.close()
        self._invocations = _KeptAlive(sagemaker_url)

    async def close(self) -> None:
        self._invocations.close()
        await self.sagemaker.aclose()

    async def load(self, target_model: str, folder: Path, timeout: float) -> Answer:
        """Register and load the unpacked archive; raises httpx.TimeoutException past ``timeout``."""
        body = {"model_name": model_hash(target_model), "url": str(folder)}
        r = await self.sagemaker.post("/models", json=body, headers={TARGET_HEADER: target_model}, timeout=timeout)
        return Answer(r.status_code, r.content, r.headers.get("content-type", ""))

    async def unload(self, target_model: str) -> Answer:
        r = await self.sagemaker.delete(f"/models/{model_hash(target_model)}", headers={TARGET_HEADER: target_model},
                                        timeout=UNLOAD_TIMEOUT_S)
        return Answer(r.status_code, r.content, r.headers.get("content-type", ""))

    async def registered(self, target_model: str) -> bool:
        """Whether the SageMaker front end lists the archive as loaded (``GET /models/<hash>``)."""
        r = await self.sagemaker.get(f"/models/{model_hash(target_model)}", timeout=30.0)
        return r.status_code == 200

    async def invoke(self, target_model: str, body: bytes, content_type: str,
                     timeout: float | None = None) -> Answer:
        """Triton's answer; httpx.TimeoutException past ``timeout`` (default INVOKE_TIMEOUT_S), another
        httpx.HTTPError when it does not answer (as the httpx client raised, so callers keep one contract)."""
        head = (f"POST /models/{model_hash(target_model)}/invoke HTTP/1.1\r\nHost: {self._invocations.host}\r\n"
                f"{TARGET_HEADER}: {target_model}\r\nContent-Type: {content_type}\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode("latin-1")
        limit = INVOKE_TIMEOUT_S if timeout is None else timeout
        try:
            return await asyncio.wait_for(self._invocations.exchange(head, body), limit)
        except asyncio.TimeoutError:
            raise httpx.ReadTimeout(f"no answer within {limit:g} s") from None
        except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
            raise httpx.RemoteProtocolError(f"{type(exc).__name__}: {exc}") from exc

    def unreachable(self, target_model: str, exc: httpx.HTTPError) -> str:
        """What to tell a caller when tritonserver did not answer at all."""
        log = f"; its log: {self.log_path}" if self.log_path else ""
        return (f"TargetModel {target_model!r}: tritonserver did not answer ({type(exc).__name__}: {exc}); it may have "
                f"exited or stalled{log}")


_SMALL_BODY = 1 << 16  # up to this size the body is joined to the head (one write); larger: two, no copy
_KEEP = 32  # idle connections kept
_OPEN = 64  # connections at once (as the httpx pool allowed); more calls wait for one


class _Unanswered(ConnectionError):
    """The connection ended before any byte of an answer."""


class _KeptAlive:
    """HTTP/1.1 exchanges with one server over a pool of kept-alive connections (opened on demand)."""

    def __init__(self, url: str) -> None:
        parsed = httpx.URL(url)
        self.host = f"{parsed.host}:{parsed.port}"
        self._address = (parsed.host, parsed.port or 80)
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self._open = asyncio.Semaphore(_OPEN)

    async def exchange(self, head: bytes, body: bytes) -> Answer:
        async with self._open:
            return await self._exchange(head, body)

    async def _exchange(self, head: bytes, body: bytes) -> Answer:
        """Send one request; a kept connection the server closed meanwhile (no byte of an answer came on
        it, so the request never reached Triton's handler) is dropped and the next one tried."""
        while self._idle:
            reader, writer = self._idle.pop()
            if writer.is_closing() or reader.at_eof():
                writer.close()
                continue
            try:
                return await self._on(reader, writer, head, body)
            except _Unanswered:
                continue
        reader, writer = await asyncio.open_connection(*self._address)
        return await self._on(reader, writer, head, body)

    async def _on(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: bytes,
                  body: bytes) -> Answer:
        try:
            if len(body) <= _SMALL_BODY:
                writer.write(head + body)
            else:
                writer.write(head)
                writer.write(body)
            try:
                raw = await reader.readuntil(b"\r\n\r\n")
            except (ConnectionError, asyncio.IncompleteReadError) as exc:
                if isinstance(exc, asyncio.IncompleteReadError) and exc.partial:
                    raise
                raise _Unanswered(f"the connection closed before an answer: {exc}") from exc
            status, headers = _head(raw)
            if "content-length" in headers:
                content = await reader.readexactly(int(headers["content-length"]))
            elif "chunked" in headers.get("transfer-encoding", ""):
                content = await _chunked(reader)
            else:  # delimited by the end of the connection
                content, headers["connection"] = await reader.read(), "close"
        except BaseException:
            writer.close()
            raise
        if "close" in headers.get("connection", "").lower() or len(self._idle) >= _KEEP:
            writer.close()
        else:
            self._idle.append((reader, writer))
        return Answer(status, content, headers.get("content-type", ""))

    def close(self) -> None:
        for _, writer in self._idle:
            writer.close()
        self._idle.clear()


def _head(raw: bytes) -> tuple[int, dict[str, str]]:
    """Status and headers (names lower-cased) of a response head."""
    lines = raw.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    return status, headers


async def _chunked(reader: asyncio.StreamReader) -> bytes:
    parts: list[bytes] = []
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0], 16)
        if size == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers
                pass
            return b"".join(parts)
        parts.append(await reader.readexactly(size))
        if await reader.readexactly(2) != b"\r\n":
            raise ValueError("a chunk of the answer does not end with CRLF")
