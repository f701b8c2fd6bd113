"""The requests of a profile run: each body sent ``requests`` times in turn, by ``concurrency`` threads, each
with its own kept-alive httpx.Client; the client's latencies are kept (the server's own figures come from its stats)."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import httpx
import numpy as np

from conch.triton.http_client import sync_client
from conch.triton.kserve_routes import infer_path, request_headers
from conch.wire import BINARY_CONTENT_TYPE, TARGET_HEADER, binary_request

TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Body:
    """A request body: binary tensors after a JSON header of ``json_size`` bytes, or JSON alone (None)."""

    content: bytes
    json_size: int | None = None

    @staticmethod
    def of(inputs: Mapping[str, np.ndarray]) -> Body:
        content, content_type = binary_request(inputs)
        size = content_type.removeprefix(BINARY_CONTENT_TYPE)
        return Body(content, int(size) if size != content_type else None)


@dataclass(frozen=True)
class Target:
    """Where requests go: a KServe v2 ``infer`` URL, or a SageMaker runtime ``invocations`` URL + headers."""

    url: str
    headers: Mapping[str, str]
    sagemaker: bool  # SageMaker's binary content type, or KServe's Inference-Header-Content-Length

    @staticmethod
    def kserve(http_url: str, model: str) -> Target:
        return Target(f"{http_url.rstrip('/')}{infer_path(model)}", {}, False)

    @staticmethod
    def front(url: str, endpoint: str, target_model: str) -> Target:
        """A SageMaker runtime front (conch serve): ``invocations`` with the TargetModel header."""
        return Target(f"{url.rstrip('/')}/endpoints/{endpoint}/invocations", {TARGET_HEADER: target_model}, True)

    def headers_for(self, body: Body) -> dict[str, str]:
        content_type = "application/json" if body.json_size is None else f"{BINARY_CONTENT_TYPE}{body.json_size}"
        return {**self.headers, **({"Content-Type": content_type} if self.sagemaker else request_headers(content_type))}


@dataclass(frozen=True)
class RunResult:
    seconds: float
    millis: tuple[float, ...]  # of each request that succeeded
    errors: tuple[str, ...]  # the first few error texts

    def client_ms(self) -> dict[str, float]:
        if not self.millis:
            return {}
        values = np.array(self.millis)
        return {"mean": float(values.mean()), "p50": float(np.percentile(values, 50)),
                "p99": float(np.percentile(values, 99))}


def run(target: Target, bodies: Sequence[Body], requests_total: int, concurrency: int) -> RunResult:
    """Send ``requests_total`` requests (the bodies in turn) with ``concurrency`` at once."""
    lock, taken = threading.Lock(), [0]
    millis: list[float] = []
    errors: list[str] = []

    def worker() -> None:
        with sync_client(target.url, timeout=TIMEOUT_S) as session:
            while True:
                with lock:
                    if taken[0] >= requests_total:
                        return
                    body = bodies[taken[0] % len(bodies)]
                    taken[0] += 1
                start = time.perf_counter()
                try:
                    answer = session.post(target.url, content=body.content, headers=target.headers_for(body))
                    ok, why = answer.status_code == 200, f"HTTP {answer.status_code}: {answer.text[:200]}"
                except (httpx.HTTPError, httpx.InvalidURL) as exc:
                    ok, why = False, f"{type(exc).__name__}: {exc}"
                elapsed = (time.perf_counter() - start) * 1000
                with lock:
                    (millis.append(elapsed) if ok else errors.append(why))

    threads = [threading.Thread(target=worker, name=f"conch-profile-{i}", daemon=True) for i in range(concurrency)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return RunResult(time.perf_counter() - start, tuple(millis), tuple(errors))
