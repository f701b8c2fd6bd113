"""One load test end to end: the target (a local Triton conch starts, or a URL/endpoint given), the run in
Locust processes, and its report written as JSON and PNG."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conch.harness.load.plots import plot_run
from conch.harness.load.report import summarise, write_json
from conch.harness.load.runner import Progress, run_load
from conch.harness.load.spec import LoadSpec


@contextmanager
def local_triton(archives: Sequence[Path], load_timeout: float = 300.0) -> Iterator[str]:
    """A tritonserver with every archive loaded as the MME platform loads it; yields its KServe URL. The
    models are addressed by their TargetModel (the archive's file name)."""
    from conch.harness.mme import MultiModelClient
    from conch.harness.replay import stage
    from conch.harness.server import LocalTriton

    with LocalTriton() as triton:
        client = MultiModelClient(triton.sagemaker_url, triton.http_url)
        for archive in archives:
            client.load(archive.name, stage(archive, triton), load_timeout)
        yield triton.http_url


@dataclass
class BenchOutput:
    summary: dict[str, Any]
    json_path: Path
    png_path: Path


def run_bench(spec: LoadSpec, out: Path, *, workers: int = 0, remote_workers: int = 0, bind: str = "127.0.0.1",
              port: int | None = None, progress: Progress | None = None, extra: dict[str, Any] | None = None,
              title: str = "") -> BenchOutput:
    """Run ``spec``'s stages and write ``out/bench.json`` and ``out/bench.png``."""
    result = run_load(spec, workers=workers, remote_workers=remote_workers, bind=bind, port=port, progress=progress)
    summary = summarise(result, extra)
    json_path, png_path = out / "bench.json", out / "bench.png"
    write_json(summary, json_path)
    plot_run(summary, png_path, title)
    return BenchOutput(summary, json_path, png_path)
