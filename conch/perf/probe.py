"""Seed 003's models-per-instance probe: load copies of one ensemble under new TargetModels through the local
MME until a threshold of a memory budget is used; how many fit, memory and load time per copy."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from conch.archive.manifest import read_manifest
from conch.ensembles.payloads import Payload
from conch.errors import ArchiveError, BenchError
from conch.perf.load.spec import archive_requests

MIN_AVAILABLE_BYTES = 1 << 30  # stop before the machine itself runs short, whatever the budget says


@dataclass
class Copy:
    index: int
    target: str
    load_s: float  # first invocation: download + unpack + load + answer (what ModelLoadingWaitTime covers)
    memory_bytes: int  # PSS of tritonserver and its Python stubs after this copy answered
    loaded: int  # LoadedModelCount
    gpu_memory_bytes: int | None = None


@dataclass
class ProbeResult:
    ensemble: str
    archive: str
    memory_budget_bytes: int
    threshold: float
    base_memory_bytes: int
    copies: list[Copy] = field(default_factory=list)
    stopped_because: str = ""
    endpoint: dict[str, Any] = field(default_factory=dict)  # step_names, restarts, retries, collisions (run_counts)

    @property
    def fit(self) -> int:
        """Copies loaded while memory stayed within the threshold of the budget."""
        limit = self.threshold * self.memory_budget_bytes
        return sum(1 for c in self.copies if c.memory_bytes <= limit)

    def to_json(self) -> dict[str, Any]:
        index = np.arange(1, len(self.copies) + 1, dtype=float)
        memory = np.array([c.memory_bytes for c in self.copies], dtype=float)
        loads = np.array([c.load_s for c in self.copies], dtype=float)
        per_copy = float(np.polyfit(index, memory, 1)[0]) if len(self.copies) > 1 else \
            float(memory[0] - self.base_memory_bytes) if len(self.copies) else 0.0
        slope = float(np.polyfit(index, loads, 1)[0]) if len(self.copies) > 2 else 0.0
        quarter = max(len(loads) // 4, 1)
        growth = float(loads[-quarter:].mean() / loads[:quarter].mean()) if len(loads) else 1.0
        gpu = [c.gpu_memory_bytes for c in self.copies if c.gpu_memory_bytes is not None]
        return {
            "ensemble": self.ensemble, "archive": self.archive, "memory_budget_bytes": self.memory_budget_bytes,
            "threshold": self.threshold, "copies_fit": self.fit, "copies_loaded": len(self.copies),
            "stopped_because": self.stopped_because, "base_memory_bytes": self.base_memory_bytes,
            "memory_per_copy_bytes": int(per_copy),
            "gpu_memory_per_copy_bytes": int(np.diff([0, *gpu]).mean()) if gpu else None,
            "load_s_mean": float(loads.mean()) if len(loads) else 0.0, "load_s_slope_per_copy": slope,
            "load_s_last_over_first_quarter": growth, "load_time_grows": bool(growth > 1.25),
            "endpoint": self.endpoint, "copies": [asdict(c) for c in self.copies],
        }


def gpu_memory_used() -> int | None:
    """Bytes used on GPU 0 via NVML, or None without a GPU (or without nvidia-ml-py)."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        used = int(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0)).used)
        pynvml.nvmlShutdown()
        return used
    except Exception:  # NVMLError when there is no driver or device
        return None


def probe(archive: Path, memory_budget: int, *, threshold: float = 0.9, max_copies: int = 200,
          load_timeout: float = 300.0, progress: Callable[[Copy], None] | None = None,
          step_names: str = "shared", payloads: Sequence[Payload] | None = None) -> ProbeResult:
    """Load copies of ``archive`` one by one (each by a first invocation of a new TargetModel) until the
    MME's memory passes ``threshold`` x ``memory_budget``, ``max_copies`` are loaded, or the machine runs low.
    With ``step_names`` ``shared`` (SageMaker's way) the copies' step names collide, and the result counts it;
    ``isolate`` loads what ``conch deploy --copies`` uploads. A load past SageMaker's 60 s wait is measured
    whole (the probe's load wait is ``load_timeout``). Each copy is called with the archive's first sample, or
    the first of ``payloads`` (``--payload FILE``, for an archive made by hand)."""
    import psutil

    from conch.perf.load.bench_run import local_mme
    from conch.triton.http_client import sync_client
    from conch.wire import TARGET_HEADER

    if not 0 < threshold <= 1:
        raise BenchError(f"threshold {threshold}: give a share of the budget between 0 and 1, e.g. 0.9")
    request = archive_requests(archive, payloads=payloads)[0]
    try:
        ensemble = read_manifest(archive).ensemble
    except ArchiveError:  # an archive made by hand, called with --payload: named after its file
        ensemble = archive.name.removesuffix(".tar.gz")
    import base64

    body = base64.b64decode(request.body)
    # every copy a name of its own, as `conch bench --copies` names them; each loads on its first call
    copies = [f"{archive.name.removesuffix('.tar.gz')}-copy{i:03d}.tar.gz" for i in range(1, max_copies + 1)]
    with local_mme([(archive, target) for target in copies], load_timeout=load_timeout, step_names=step_names,
                   load_wait=load_timeout + 30, invocation_timeout=load_timeout + 60) as mme, \
            sync_client(mme.url, timeout=load_timeout + 90) as http:
        result = ProbeResult(ensemble, archive.name, memory_budget, threshold,
                             int(mme.metrics_json()["MemoryUsedBytes"]))
        if result.base_memory_bytes > threshold * memory_budget:
            result.stopped_because = "the empty server already uses more than the threshold of the budget"
            result.endpoint = mme.counts()
            return result
        for index, target in enumerate(copies, 1):
            start = time.perf_counter()
            answer = http.post(f"{mme.url}/endpoints/{mme.endpoint_name}/invocations", content=body,
                               headers={"Content-Type": request.content_type, TARGET_HEADER: target})
            load_s = time.perf_counter() - start
            if answer.status_code != 200:
                result.stopped_because = f"copy {index} failed to load: HTTP {answer.status_code} {answer.text[:200]}"
                break
            metrics = mme.metrics_json()
            copy = Copy(index, target, load_s, int(metrics["MemoryUsedBytes"]), int(metrics["LoadedModelCount"]),
                        gpu_memory_used())
            result.copies.append(copy)
            if progress:
                progress(copy)
            if copy.memory_bytes > threshold * memory_budget:
                result.stopped_because = f"memory passed {threshold:.0%} of the budget"
                break
            if psutil.virtual_memory().available < MIN_AVAILABLE_BYTES:
                result.stopped_because = "this machine has less than 1 GiB of memory left"
                break
        else:
            result.stopped_because = f"--max-copies {max_copies} reached"
        result.endpoint = mme.counts()
    return result


def plot_probe(data: dict[str, Any], path: Path) -> Path:
    """Memory against copies (with the threshold), and load time per copy."""
    from conch.perf.load.plots import pyplot, save_png

    plt = pyplot()
    copies = data["copies"]
    xs = [c["index"] for c in copies]
    fig, (mem, load) = plt.subplots(1, 2, figsize=(11, 4.5), constrained_layout=True)
    mem.plot([0, *xs], [data["base_memory_bytes"] / 2**20, *[c["memory_bytes"] / 2**20 for c in copies]], "o-",
             label="tritonserver + stubs (PSS)")
    mem.axhline(data["threshold"] * data["memory_budget_bytes"] / 2**20, color="tab:red", linestyle="--",
                label=f"{data['threshold']:.0%} of the budget")
    mem.set_xlabel("copies loaded")
    mem.set_ylabel("memory (MiB)")
    mem.legend(fontsize=8)
    load.bar(xs, [c["load_s"] for c in copies])
    load.set_xlabel("copy")
    load.set_ylabel("first call (download + load + answer), s")
    fig.suptitle(f"{data['ensemble']}: {data['copies_fit']} copies fit, "
                 f"{data['memory_per_copy_bytes'] / 2**20:.0f} MiB per copy")
    return save_png(fig, path)
