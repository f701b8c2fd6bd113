"""Shared memory for the Python backend, sized from the ensemble: every Python-backend model instance
passes a batch's input and output tensors through its own shared-memory region, which starts at the
server's ``shm-default-byte-size`` and grows by ``shm-growth-byte-size``. SageMaker's Triton image sets
16 MB + 1 MB unless ``SAGEMAKER_TRITON_SHM_DEFAULT_BYTE_SIZE`` / ``..._GROWTH_BYTE_SIZE`` say otherwise
(sagemaker-examples#3506: large tensors fail there). A tensor's size comes from its declared dims and the
step's max_batch_size; a variable dim or a BYTES tensor is sized from the largest the samples produce."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from conch.archive.manifest import Manifest, ShmRecord, read_manifest
from conch.compiler.compiled import CompiledEnsemble, CompiledStep
from conch.ensembles.run_result import RunResult
from conch.ensembles.target import Target
from conch.ensembles.tensors import Tensor
from conch.errors import ArchiveError

MIB = 1024 * 1024
SAGEMAKER_DEFAULT_BYTES = 16 * MIB  # docker/sagemaker/serve in triton-inference-server/server
SAGEMAKER_GROWTH_BYTES = 1 * MIB
MARGIN_BYTES = 1 * MIB  # the region also holds the request/response objects and an allocator's headers
ENV_DEFAULT = "SAGEMAKER_TRITON_SHM_DEFAULT_BYTE_SIZE"
ENV_GROWTH = "SAGEMAKER_TRITON_SHM_GROWTH_BYTE_SIZE"

# model name -> "input x" / "output y" -> largest bytes per batch row (whole tensor for non-batching steps)
RowBytes = dict[str, dict[str, int]]


def _sized_by_declaration(t: Tensor) -> bool:
    return t.dtype.wire != "BYTES" and all(d > 0 for d in t.dims)


def may_serve_python(step: CompiledStep, target: Target) -> bool:
    """Whether a step runs on the Python backend in this target (every step is a stand-in locally)."""
    return target is Target.LOCAL or step.python_in_production


def needs_samples(plan: CompiledEnsemble) -> bool:
    """Whether a Python-backend step has a tensor whose size only a run can tell."""
    return any(not _sized_by_declaration(t) for s in plan.steps if may_serve_python(s, plan.target)
               for _, t in s.sized())


def row_bytes(array: np.ndarray, batching: bool) -> int:
    """Bytes of one batch row (the whole tensor without batching) as the Python backend stores it:
    BYTES elements with their 4-byte length."""
    if array.dtype == object:
        total = sum(4 + len(v if isinstance(v, bytes) else str(v).encode()) for v in array.ravel())
    else:
        total = int(array.nbytes)
    rows = array.shape[0] if batching and array.ndim else 1
    return math.ceil(total / max(rows, 1))


def observe_row_bytes(plan: CompiledEnsemble, runs: Sequence[RunResult]) -> RowBytes:
    """The largest bytes per row of every step tensor over in-process runs of the samples."""
    seen: RowBytes = {}
    for run in runs:
        for compiled, trace in zip(plan.steps, run.steps, strict=True):
            batching = compiled.step.max_batch_size > 0
            sizes = seen.setdefault(trace.model_name, {})
            for kind, arrays in (("input", trace.inputs), ("output", trace.outputs)):
                for name, array in arrays.items():
                    key = f"{kind} {name}"
                    sizes[key] = max(sizes.get(key, 0), row_bytes(array, batching))
    return seen


@dataclass
class ShmPlan:
    """What each Python-backend model needs per batch, and the server settings that hold it."""

    steps: dict[str, dict[str, Any]] = field(default_factory=dict)
    unknown: list[str] = field(default_factory=list)
    unmeasured: str | None = None

    @property
    def need_bytes(self) -> int:
        """The largest region one Python-backend instance needs for a full batch (0: no Python steps)."""
        return max((s["bytes"] for s in self.steps.values()), default=0)

    @property
    def default_byte_size(self) -> int:
        """shm-default-byte-size: a full batch fits without growing; never below SageMaker's default."""
        return max(SAGEMAKER_DEFAULT_BYTES, math.ceil(self.need_bytes / MIB) * MIB)

    @property
    def growth_byte_size(self) -> int:
        return SAGEMAKER_GROWTH_BYTES

    def exceeds_sagemaker_default(self) -> bool:
        return self.need_bytes > SAGEMAKER_DEFAULT_BYTES

    def record(self) -> ShmRecord:
        """The plan as the manifest records it."""
        return ShmRecord(self.need_bytes, self.default_byte_size, self.growth_byte_size,
                         sum(s["instances"] * self.default_byte_size for s in self.steps.values()),
                         dict(self.steps), tuple(self.unknown), self.unmeasured)

    def warn(self, ensemble: str, progress: Callable[[str], None] | None) -> list[str]:
        """The warning (at most one line per archive), also shown through ``progress`` (the build's messages)."""
        found = self.warnings(ensemble)
        for warning in found if progress else ():
            progress(f"warning: {warning}")  # type: ignore[misc]
        return found

    def warnings(self, ensemble: str) -> list[str]:
        """One line about this plan's steps, or none: the figure SageMaker's default falls short of and what
        `conch deploy` sets, then the tensors no sample could size."""
        parts = []
        if self.exceeds_sagemaker_default():
            model, step = max(self.steps.items(), key=lambda kv: kv[1]["bytes"])
            parts.append(
                f"Python-backend model {model!r} passes up to {_mb(step['bytes'])} through "
                f"shared memory per batch (max_batch_size {step['batch']}), more than the "
                f"{_mb(SAGEMAKER_DEFAULT_BYTES)} SageMaker's Triton image gives each Python model instance; "
                f"`conch deploy` sets {ENV_DEFAULT}={self.default_byte_size} (or lower max_batch_size)"
            )
        if self.unknown:
            why = self.unmeasured or "no sample to measure them; declare a sample with ensemble.sample()"
            parts.append(f"shared memory not sized for {', '.join(self.unknown)} (variable dims or BYTES): {why}")
        return [f"ensemble {ensemble!r}: {'; '.join(parts)}"] if parts else []


def plan_shm(
    compiled: CompiledEnsemble, python_models: Iterable[str], seen: Mapping[str, Mapping[str, int]],
    unmeasured: str | None,
) -> ShmPlan:
    """The shared memory each Python-backend model of the build needs for a batch of max_batch_size rows
    (for a step that does not batch: its largest tensors in the samples)."""
    plan = ShmPlan(unmeasured=unmeasured)
    served = set(python_models)
    for one in compiled.steps:
        model = one.model_name
        if model not in served:
            continue
        step = one.step
        batch = step.max_batch_size or 1
        observed = seen.get(model, {})
        total = 0
        for key, t in one.sized():
            if _sized_by_declaration(t):
                per_row = math.prod(t.dims) * t.dtype.numpy.itemsize
            elif key in observed:
                per_row = observed[key]
            else:
                plan.unknown.append(f"{model} {key}")
                continue
            total += per_row * batch
        groups = step.settings.instance_groups
        instances = sum(g.count for g in groups) if groups else 1
        plan.steps[model] = {"batch": batch, "bytes": total + MARGIN_BYTES, "instances": instances}
    return plan


def _mb(n: int) -> str:
    return f"{n / MIB:.1f} MiB"


def server_settings(manifests: Iterable[Manifest]) -> tuple[int, int]:
    """(shm-default-byte-size, shm-growth-byte-size) that hold every archive's Python-backend steps:
    SageMaker's defaults unless an archive needs more."""
    sized = [m.shm for m in manifests if m.shm is not None]
    return (max([SAGEMAKER_DEFAULT_BYTES, *(s.default_byte_size for s in sized)]),
            max([SAGEMAKER_GROWTH_BYTES, *(s.growth_byte_size for s in sized)]))


def archives_settings(archives: Iterable[Path]) -> tuple[int, int]:
    """Default and growth sizes for a local server holding these archives, as `conch deploy` sets them on
    SageMaker (unreadable archives are skipped: whoever loads them reports them)."""
    manifests = []
    for archive in archives:
        try:
            manifests.append(read_manifest(archive))  # one streaming pass that stops at the manifest
        except ArchiveError:  # e.g. truncated
            continue
    return server_settings(manifests)
