"""Derived ensemble warmup: run the ensemble's warmup payload through the DAG in this process and give
every step a ``model_warmup`` whose inputs are files in its ``warmup/`` folder holding the tensors that
step receives. Triton's warmup sends ``batch_size`` requests of one row each, all from the same file, so
a batching step is warmed with the payload's batch size and its first row (a step that does not batch
gets the whole tensor)."""

from __future__ import annotations

import re
import struct
from collections.abc import MutableMapping
from dataclasses import dataclass, field, replace

import numpy as np

from conch.archive.manifest import WarmupRecord
from conch.compiler.compiled import CompiledEnsemble
from conch.ensembles.config import Warmup, WarmupInput
from conch.ensembles.dtypes import DType
from conch.ensembles.layout import FileSource, ModelSpec
from conch.ensembles.run_result import RunResult
from conch.ensembles.warmup import WarmupRequest
from conch.errors import BuildError

WARMUP_NAME = "conch derived warmup"
WARMUP_FOLDER = "warmup"


@dataclass
class StepWarmup:
    """One step's derived warmup entry and its data files (paths relative to the model folder)."""

    entry: Warmup
    files: dict[str, bytes] = field(default_factory=dict)


@dataclass
class DerivedWarmup:
    """The warmup of every step of one ensemble, keyed by model name (none when none is declared)."""

    source: str | None = None
    steps: dict[str, StepWarmup] = field(default_factory=dict)

    def attach(self, model: str, spec: ModelSpec, files: MutableMapping[str, FileSource]) -> ModelSpec:
        """The step's spec with its derived warmup added; its data files are added to ``files``."""
        step = self.steps.get(model)
        if step is None:
            return spec
        for rel, data in step.files.items():
            files[f"{model}/{rel}"] = data
        return replace(spec, settings=replace(spec.settings, warmups=(*spec.settings.warmups, step.entry)))

    def record(self) -> WarmupRecord | None:
        """The derived warmup as the manifest records it (None when none is declared)."""
        if self.source is None:
            return None
        return WarmupRecord(self.source, {
            model: {"batch_size": s.entry.batch_size, "count": s.entry.count,
                    "inputs": {i.name: {"dims": list(i.dims), "file": f"{WARMUP_FOLDER}/{i.data_file}"}
                               for i in s.entry.inputs}}
            for model, s in sorted(self.steps.items())
        })


def derive_warmup(plan: CompiledEnsemble, request: WarmupRequest, result: RunResult) -> DerivedWarmup:
    """Every step's warmup from the in-process run of the ensemble's warmup payload."""
    steps = {}
    for compiled, trace in zip(plan.steps, result.steps, strict=True):
        batching = compiled.step.max_batch_size > 0
        inputs, files = [], {}
        batch = 1
        for index, (name, array) in enumerate(trace.inputs.items()):
            spec = next(t for t in compiled.step.inputs if t.name == name)
            if batching:
                batch, array = array.shape[0], array[0]
            data_file = f"{index}_{_safe(name)}"
            files[f"{WARMUP_FOLDER}/{data_file}"] = raw_bytes(array, spec.dtype)
            inputs.append(WarmupInput(name, spec.dtype, tuple(int(d) for d in array.shape), data_file))
        entry = Warmup(WARMUP_NAME, batch_size=batch, count=request.count, inputs=tuple(inputs))
        steps[trace.model_name] = StepWarmup(entry, files)
    return DerivedWarmup(request.describe(), steps)


def raw_bytes(array: np.ndarray, dtype: DType) -> bytes:
    """A tensor as Triton reads ``input_data_file``: row-major raw values; BYTES as length-prefixed items."""
    if dtype is DType.BYTES:
        items = [v.encode() if isinstance(v, str) else bytes(v) for v in array.ravel()]
        return b"".join(struct.pack("<I", len(v)) + v for v in items)
    if array.size == 0:
        raise BuildError(f"warmup tensor of shape {list(array.shape)} is empty; Triton cannot warm with it")
    return np.ascontiguousarray(array, dtype=dtype.numpy.newbyteorder("<")).tobytes()


def _safe(name: str) -> str:
    """A tensor name as a file name (TensorFlow names hold '/')."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)
