"""The hop from the front to Triton's SageMaker front end: the calls the SageMaker platform makes to the
container (``POST /models``, ``DELETE /models/<hash>``, ``POST /models/<hash>/invoke``), with httpx."""

from __future__ import annotations

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

    def rebind(self, sagemaker_url: str) -> None:
        """Talk to a restarted server (on new ports) from now on."""
        self.sagemaker.base_url = httpx.URL(sagemaker_url)

    async def close(self) -> None:
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

    async def invoke(self, target_model: str, body: bytes, content_type: str, timeout: float | None = None) -> Answer:
        """Raises httpx.TimeoutException past ``timeout`` (default ``INVOKE_TIMEOUT_S``)."""
        headers = {TARGET_HEADER: target_model, "Content-Type": content_type}
        r = await self.sagemaker.post(f"/models/{model_hash(target_model)}/invoke", content=body, headers=headers,
                                      timeout=INVOKE_TIMEOUT_S if timeout is None else timeout)
        return Answer(r.status_code, r.content, r.headers.get("content-type", ""))

    def unreachable(self, target_model: str, exc: httpx.HTTPError) -> str:
        """What to tell a caller when tritonserver did not answer at all."""
        log = f"; its log: {self.log_path}" if self.log_path else ""
        return (f"TargetModel {target_model!r}: tritonserver did not answer ({type(exc).__name__}: {exc}); it may have "
                f"exited or stalled{log}")
