"""One load test end to end: the target (a local Triton conch starts, or a URL/endpoint given), the run in
Locust processes, and its report written as JSON and PNG."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conch.endpoint.metrics import run_counts
from conch.perf.load.plots import plot_run
from conch.perf.load.run_summary import problems, summarise, write_json
from conch.perf.load.runner import Progress, run_load
from conch.perf.load.spec import LoadSpec, not_applicable
from conch.scratch import scratch_temp


@contextmanager
def local_triton(named: Sequence[tuple[Path, str]], load_timeout: float = 300.0) -> Iterator[str]:
    """A tritonserver with every (archive, TargetModel) loaded as the MME platform loads it; yields its KServe
    URL, where each model is addressed by its TargetModel."""
    from conch.replays.local_replay import stage
    from conch.triton.mme import MultiModelClient
    from conch.triton.server import LocalTriton
    from conch.triton.stub_python import releases_of, strict_default, stub_python

    stub = stub_python(releases_of([a for a, _ in named]), strict=strict_default())  # the images' Python
    with LocalTriton(model_namespacing=len({a for a, _ in named}) < len(named), stub=stub) as triton:
        client = MultiModelClient(triton.sagemaker_url, triton.http_url, server=triton)
        for archive, name in named:
            client.load(name, stage(archive, triton, name), load_timeout)
        yield triton.http_url


def copy_names(archives: Sequence[Path], copies: int = 1) -> list[tuple[Path, str]]:
    """(archive, TargetModel) pairs: each archive under its own name, or under ``copies`` new names (seed 003
    benchmarks many copies of one model)."""
    if copies <= 1:
        return [(a, a.name) for a in archives]
    return [(a, f"{a.name.removesuffix('.tar.gz')}-copy{i:03d}.tar.gz") for a in archives for i in range(1, copies + 1)]


@contextmanager
def local_mme(named: Sequence[tuple[Path, str]], **options: Any) -> Iterator[Any]:
    """conch's local MME over a folder holding the archives under their TargetModels (``options`` go to
    ``LocalMME``: ``step_names`` is ``shared`` unless given, as on SageMaker); yields the running LocalMME."""
    from conch.endpoint import LocalMME
    from conch.triton.stub_python import release_of

    with scratch_temp("conch-bench-") as tmp:
        for archive, name in named:
            os.symlink(archive.resolve(), Path(tmp) / name)
        options.setdefault("release", release_of([a for a, _ in named]))  # the archives' image and its Python
        with LocalMME(Path(tmp), **options) as mme:
            yield mme


@contextmanager
def local_components(archives: Sequence[Path], endpoint_name: str, **options: Any) -> Iterator[Any]:
    """conch's local endpoint with one inference component per archive (``options`` go to ``LocalComponents``);
    yields it running."""
    from conch.endpoint.local_components import LocalComponents

    with LocalComponents(archives, endpoint_name=endpoint_name, **options) as local:
        yield local


def endpoint_metrics(url: str) -> dict[str, Any] | None:
    """``GET <url>/metrics.json`` of an endpoint conch serves (its counts of restarts, retries, collisions), or
    None when the endpoint publishes none (a SageMaker endpoint, another server, or none answering)."""
    import httpx

    from conch.triton.http_client import sync_client

    try:
        with sync_client(url, timeout=10.0) as http:
            response = http.get(f"{url.rstrip('/')}/metrics.json")
        data = response.json() if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
    return data if isinstance(data, dict) and "TritonRestarts" in data else None


@dataclass
class BenchOutput:
    summary: dict[str, Any]
    json_path: Path
    png_path: Path


def run_bench(spec: LoadSpec, out: Path, *, workers: int = 0, remote_workers: int = 0, bind: str = "127.0.0.1",
              port: int | None = None, progress: Progress | None = None, extra: dict[str, Any] | None = None,
              finish: Callable[[], dict[str, Any] | None] | None = None, title: str = "") -> BenchOutput:
    """Run ``spec``'s stages and write ``out/bench.json``, ``out/bench.png`` and every request in
    ``out/bench-records.json``; ``finish`` (e.g. the local MME's
    metrics) is called right after the load and its answer kept as ``mme_metrics_after``."""
    result = run_load(spec, workers=workers, remote_workers=remote_workers, bind=bind, port=port, progress=progress)
    after = finish() if finish else None
    summary = summarise(result, {**(extra or {}), **({"mme_metrics_after": after} if after is not None else {})})
    if after is not None:  # what the endpoint did that production would not (restarts, retries, collisions)
        summary["endpoint"] = run_counts(summary.get("mme_metrics_before"), after)
    summary["not_applicable"] = not_applicable(spec.targets)
    summary["problems"] = problems(summary)
    json_path, png_path = out / "bench.json", out / "bench.png"
    write_json(summary, json_path)
    write_json({"started": result.started, "ended": result.ended, "timeline": result.timeline,
                "targets": [t.name for t in spec.targets],
                "fields": ["start", "latency_ms", "ok", "target", "error"], "records": result.records},
               out / "bench-records.json")
    plot_run(summary, png_path, title)
    return BenchOutput(summary, json_path, png_path)
