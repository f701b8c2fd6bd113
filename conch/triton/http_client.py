"""conch's sync HTTP client: httpx's ``Client`` (docs/architecture.md, "HTTP clients"), made for the servers it
talks to. httpx builds an SSL context with certifi's CA bundle for every Client, whatever it will call (~33-55 ms
of CPU here, benchmarks/RESULTS.md "Issue 31: one client per job"); a Client for http:// servers only (a local
tritonserver, always) has no TLS to verify, so only one with an https:// server loads the bundle."""

from __future__ import annotations

from typing import Any

import httpx


def sync_client(*urls: str, timeout: float, **options: Any) -> httpx.Client:
    """An ``httpx.Client`` for calls to ``urls``' servers, ``timeout`` seconds for each of connect, read, write
    and a place in the pool; ``options`` as httpx's (e.g. ``limits``). It follows no redirect (httpx's default):
    TLS is set up only when one of ``urls`` is https://."""
    return httpx.Client(timeout=timeout, verify=not all(_plain(url) for url in urls), **options)


def _plain(url: str) -> bool:
    try:
        return httpx.URL(url).scheme == "http"
    except httpx.InvalidURL:  # said by the call that sends to it, where the caller handles it
        return False
