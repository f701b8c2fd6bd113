"""The hop from the front to Triton's SageMaker front end: the calls the SageMaker platform makes to the
container (``POST /models``, ``DELETE /models/<hash>``, ``POST /models/<hash>/invoke``, as
conch.harness.mme_contract spells them for the sync client too). Loads and unloads
go through httpx; invocations, the hot path, through aiohttp's client on a pool of kept-alive connections
(its C HTTP parser, no per-request client machinery: httpx cost ~1 ms per call, see benchmarks/RESULTS.md)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import httpx
from yarl import URL

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
    """Async client of one tritonserver's SageMaker front end."""

    def __init__(self, sagemaker_url: str, log_path: Path | None = None) -> None:
        self.log_path = log_path
        limits = httpx.Limits(max_connections=_OPEN, max_keepalive_connections=32)
        self.sagemaker = httpx.AsyncClient(base_url=sagemaker_url, limits=limits, timeout=INVOKE_TIMEOUT_S)
        self._url = sagemaker_url.rstrip("/")
        self._invocations: aiohttp.ClientSession | None = None  # made on first use, inside the running loop
        # per TargetModel and Content-Type: the invoke URL and headers, made once (the name's hash, the URL parse)
        self._calls: dict[tuple[str, str], tuple[URL, dict[str, str]]] = {}

    async def rebind(self, sagemaker_url: str) -> None:
        """Talk to a restarted server (on new ports) from now on."""
        self.sagemaker.base_url = httpx.URL(sagemaker_url)
        self._url = sagemaker_url.rstrip("/")
        self._calls.clear()
        await self._close_invocations()

    async def close(self) -> None:
        await self._close_invocations()
        await self.sagemaker.aclose()

    async def _close_invocations(self) -> None:
        session, self._invocations = self._invocations, None
        if session is not None:
            await session.close()

    def _session(self) -> aiohttp.ClientSession:
        if self._invocations is None:
            connector = aiohttp.TCPConnector(limit=_OPEN, keepalive_timeout=_IDLE_S)
            # no Accept-Encoding (Triton would compress answers), no cookies, Triton's bytes passed through as sent
            self._invocations = aiohttp.ClientSession(
                connector=connector, cookie_jar=aiohttp.DummyCookieJar(), auto_decompress=False,
                skip_auto_headers=("Accept-Encoding", "User-Agent"), timeout=aiohttp.ClientTimeout(total=None))
        return self._invocations

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
        httpx.HTTPError when it does not answer (as the httpx client raised, so callers keep one contract)."""
        url, headers = self._call(target_model, content_type)
        limit = INVOKE_TIMEOUT_S if timeout is None else timeout
        session = self._session()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limit
        try:
            for attempt in (1, 2):
                wait = aiohttp.ClientTimeout(total=max(deadline - loop.time(), 0.001))
                try:
                    async with session.post(url, data=body, headers=headers, timeout=wait) as r:
                        return Answer(r.status, await r.read(), r.headers.get("Content-Type", ""))
                except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
                    # the connection ended before the head of an answer (or took no request): a kept one
                    # Triton closed while it was idle; tried once more, on another connection (aiohttp
                    # retries only idempotent methods by itself)
                    if attempt == 2:
                        raise
            raise AssertionError("two attempts either return or raise")
        except asyncio.TimeoutError:  # what aiohttp raises past a ClientTimeout (TimeoutError from 3.11)
            raise httpx.ReadTimeout(f"no answer within {limit:g} s") from None
        except aiohttp.ClientConnectorError as exc:
            raise httpx.ConnectError(f"{type(exc).__name__}: {exc}") from exc
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
            raise httpx.RemoteProtocolError(f"the connection closed before an answer: {exc}") from exc
        except aiohttp.ClientError as exc:
            raise httpx.RemoteProtocolError(f"{type(exc).__name__}: {exc}") from exc

    def _call(self, target_model: str, content_type: str) -> tuple[URL, dict[str, str]]:
        key = (target_model, content_type)
        call = self._calls.get(key)
        if call is None:
            if len(self._calls) >= _CALLS_KEPT:  # names callers made up must not grow it without end
                self._calls.clear()
            call = self._calls[key] = (URL(f"{self._url}{invoke_path(target_model)}"),
                                       target_headers(target_model, content_type))
        return call

    def unreachable(self, target_model: str, exc: httpx.HTTPError) -> str:
        """What to tell a caller when tritonserver did not answer at all."""
        log = f"; its log: {self.log_path}" if self.log_path else ""
        return (f"TargetModel {target_model!r}: tritonserver did not answer ({type(exc).__name__}: {exc}); it may have "
                f"exited or stalled{log}")


_OPEN = 64  # connections to Triton at once (as the httpx pool allowed); more calls wait for one
_IDLE_S = 30.0  # an idle kept connection is closed after this long
_CALLS_KEPT = 4096  # (TargetModel, Content-Type) pairs whose URL and headers are kept
