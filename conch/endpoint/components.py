"""The inference components of a local endpoint: each its own tritonserver per copy (as SageMaker runs one
container per copy), its copy count, its memory reservation, and its metrics under CloudWatch's names for
inference components (namespace ``AWS/SageMaker``, dimension ``InferenceComponentName``)."""

from __future__ import annotations

import itertools
import logging
import shutil
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from conch.archive.extract import safe_extract
from conch.endpoint.metrics import BUCKETS
from conch.errors import ServeError
from conch.scratch import scratch_dir
from conch.triton.mme import MultiModelClient
from conch.triton.mme_contract import root_model_staged
from conch.triton.server import LocalTriton

log = logging.getLogger("conch.endpoint")
COPY_START_TIMEOUT_S = 300.0
LABEL = "InferenceComponentName"


class ComponentMetrics:
    """Per component, under the names CloudWatch publishes for inference components (times in seconds here)."""

    def __init__(self) -> None:
        self.registry = r = CollectorRegistry(auto_describe=True)
        self.invocations = Counter("Invocations", "invocations answered (any status)", [LABEL], registry=r)
        self.errors_4xx = Counter("Invocation4XXErrors", "invocations answered 4XX", [LABEL], registry=r)
        self.errors_5xx = Counter("Invocation5XXErrors", "invocations answered 5XX", [LABEL], registry=r)
        self.model_errors = Counter("InvocationModelErrors", "invocations the model answered with an error",
                                    [LABEL], registry=r)
        self.no_capacity = Counter("NoCapacityInvocationFailures", "invocations refused: the component had no copy",
                                   [LABEL], registry=r)
        self.latency = Histogram("ModelLatency", "seconds the component's Triton took to answer", [LABEL],
                                 registry=r, buckets=BUCKETS)
        # conch's own: the copies serving now, and the copy count asked for
        self.copies = Gauge("CopyCount", "copies serving now", [LABEL], registry=r)
        self.desired = Gauge("DesiredCopyCount", "copies asked for (scale-out under way when above CopyCount)",
                             [LABEL], registry=r)

    def prometheus(self) -> bytes:
        return generate_latest(self.registry)

    def snapshot(self) -> dict[str, dict[str, float]]:
        """``{component: {metric: value}}``; ModelLatency as its count and sum."""
        out: dict[str, dict[str, float]] = {}
        for family in self.registry.collect():
            for sample in family.samples:
                name = sample.name.removesuffix("_total")
                if sample.name.endswith(("_bucket", "_created")) or LABEL not in sample.labels:
                    continue
                out.setdefault(sample.labels[LABEL], {})[name] = sample.value
        return out


class Copy:
    """One copy: a tritonserver of its own with the archive loaded. Started from a thread of its own, which
    lives as long as the copy (the server dies with the thread that started it)."""

    def __init__(self, archive: Path, on_change: Callable[[], None]) -> None:
        self.archive = archive
        self.triton = LocalTriton.sized_for([archive])
        self.ready = threading.Event()
        self.failed: str | None = None
        self._stop = threading.Event()
        self._on_change = on_change
        self.thread = threading.Thread(target=self._run, name=f"conch-copy-{archive.name}", daemon=True)

    def start(self) -> Copy:
        self.thread.start()
        return self

    def _run(self) -> None:
        folder = Path(tempfile.mkdtemp(prefix="conch-copy-", dir=scratch_dir())) / "model"
        try:
            self.triton.start()
            safe_extract(self.archive, folder)
            with MultiModelClient(self.triton.sagemaker_url, self.triton.http_url, server=self.triton) as client:
                client.load(self.archive.name, root_model_staged(folder), COPY_START_TIMEOUT_S)
        except Exception as exc:  # the copy reports it; the thread must end cleanly
            self.failed = str(exc)
            log.error("a copy of %s did not start: %s", self.archive.name, exc)
        self.ready.set()
        self._on_change()
        if self.failed is None:
            self._stop.wait()
        self.triton.stop()
        shutil.rmtree(folder.parent, ignore_errors=True)

    @property
    def serving(self) -> bool:
        # a copy whose tritonserver died serves nothing: it is not routed to (its death is in the server's log)
        return self.ready.is_set() and self.failed is None and not self._stop.is_set() and self.triton.running()

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout: float = 60.0) -> None:
        self.thread.join(timeout)


@dataclass
class Component:
    """An archive served as one inference component: its copies and what one copy reserves."""

    name: str
    archive: Path
    memory_mb: int
    copies: list[Copy] = field(default_factory=list)
    desired: int = 0
    _turn: Any = field(default_factory=lambda: itertools.count())

    def serving(self) -> list[Copy]:
        return [c for c in self.copies if c.serving]

    def pick(self) -> Copy | None:
        """A serving copy, round robin; None at zero copies (or while the first one starts)."""
        ready = self.serving()
        return ready[next(self._turn) % len(ready)] if ready else None


def reserved_mb(components: dict[str, Component], changing: str | None = None, to: int = 0) -> int:
    """MiB the components' copies reserve, with ``changing`` at ``to`` copies."""
    return sum(c.memory_mb * (to if name == changing else c.desired) for name, c in components.items())


def refuse_unfit(components: dict[str, Component], memory_mb: int, name: str, count: int) -> None:
    """SageMaker places a copy only where its reservation fits: refuse ``count`` copies of ``name`` that do not
    fit ``memory_mb`` with the others' reservations, with the numbers."""
    total = reserved_mb(components, name, count)
    if total > memory_mb:
        others = total - components[name].memory_mb * count
        raise ServeError(f"inference component {name!r}: {count} copies x {components[name].memory_mb} MiB do not fit "
                         f"the instance's {memory_mb} MiB (the other components reserve {others} MiB); lower the "
                         "reservation (--component-memory, --resources) or raise --memory")
