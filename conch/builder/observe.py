"""What a build learns by running the ensemble in this process (conch.run): the tensors each step receives
for the warmup payload, and how large each step's tensors get for the samples (to size shared memory).
Nothing runs when the ensemble declares no warmup and every tensor's size follows from its declaration.

A run's findings are kept in conch's cache under a key of everything they follow from (the declaration,
each step's local layout with the digests of its files, the step code's folder, the samples' and the
warmup payload's arrays, the target and release, and the conch code that runs and reads them), so an
unchanged rebuild runs nothing."""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from conch import __version__
from conch.builder.buildcache import code_digest, digest, key_of, read_json, write_json
from conch.builder.shm import RowBytes, needs_samples, observe_row_bytes
from conch.builder.warmup import DerivedWarmup, StepWarmup, derive_warmup
from conch.cache import cache_dir
from conch.ensembles.config import Warmup, WarmupInput
from conch.ensembles.dtypes import DType
from conch.ensembles.ensemble import Ensemble
from conch.ensembles.target import Release, Target
from conch.errors import BuildError, ConchError

runs = 0  # in-process runs of observe() in this process (what the cache saves; tests read it)


@dataclass
class Observed:
    """The derived warmup (empty when none is declared) and, per model, the largest bytes per batch row
    seen for each of its tensors over the samples (empty, with the reason, when they could not run)."""

    warmup: DerivedWarmup = field(default_factory=DerivedWarmup)
    row_bytes: RowBytes = field(default_factory=dict)
    unmeasured: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.warmup.source,
            "steps": {model: {"name": s.entry.name, "batch_size": s.entry.batch_size, "count": s.entry.count,
                              "inputs": [[i.name, i.dtype.wire, list(i.dims), i.data_file] for i in s.entry.inputs],
                              "files": {rel: base64.b64encode(data).decode() for rel, data in s.files.items()}}
                      for model, s in self.warmup.steps.items()},
            "row_bytes": self.row_bytes,
        }

    @staticmethod
    def from_json(data: dict[str, Any]) -> Observed:
        steps = {}
        for model, s in data["steps"].items():
            inputs = tuple(WarmupInput(name, DType.of(dtype), tuple(dims), file)
                           for name, dtype, dims, file in s["inputs"])
            entry = Warmup(s["name"], batch_size=s["batch_size"], count=s["count"], inputs=inputs)
            steps[model] = StepWarmup(entry, {rel: base64.b64decode(b) for rel, b in s["files"].items()})
        return Observed(DerivedWarmup(data["source"], steps), {m: dict(v) for m, v in data["row_bytes"].items()})


def observe(ensemble: Ensemble, target: Target, release: Release, refresh: bool = False) -> Observed:
    """Run the warmup payload and, when sizes must be measured, the samples, with the steps loaded once.
    A warmup that cannot run fails the build; samples that cannot run leave the sizes unmeasured.

    The findings come from the cache when everything they follow from is unchanged (``refresh`` runs
    anyway); findings with unmeasured sizes are not kept, so a fixed environment is tried again. The
    packages installed in this Python are not part of the key (as for sample expected outputs): after
    upgrading one a step uses, build with ``--refresh``."""
    request = ensemble.warmup_request
    measure = needs_samples(ensemble, target) and bool(ensemble.samples)
    if request is None and not measure:
        return Observed()
    try:
        key = observation_key(ensemble, target, release, measure)
    except ConchError:  # e.g. a warmup naming no sample: the run below says so, in the build's words
        return _run(ensemble, release, measure)
    where = cache_dir() / "observed" / f"{key[:32]}.json"
    known = None if refresh else read_json(where)
    if isinstance(known, dict):
        try:
            return Observed.from_json(known)
        except (KeyError, TypeError, ValueError, ConchError):  # an older or damaged record: run again
            pass
    observed = _run(ensemble, release, measure)
    if observed.unmeasured is None:
        write_json(where, observed.to_json())
    return observed


def _run(ensemble: Ensemble, release: Release, measure: bool) -> Observed:
    global runs
    from conch.run import Executor

    runs += 1
    request = ensemble.warmup_request
    observed = Observed()
    with Executor(ensemble, release=release) as executor:
        if request is not None:
            try:
                result = executor.run(request.resolve(ensemble), intermediates=True)
            except ConchError as exc:
                raise BuildError(f"ensemble {ensemble.name!r}: warmup from {request.describe()}: running it in this "
                                 f"process failed: {exc}") from exc
            observed.warmup = derive_warmup(ensemble, request, result)
        if measure:
            try:
                results = [executor.run(s.inputs, intermediates=True) for s in ensemble.samples]
            except ConchError as exc:
                observed.unmeasured = f"running the samples in this process failed: {exc}"
            else:
                observed.row_bytes = observe_row_bytes(ensemble, results)
    return observed


_OWN_CODE = ("run.py", "builder/observe.py", "builder/shm.py", "builder/warmup.py")


def observation_key(ensemble: Ensemble, target: Target, release: Release, measure: bool) -> str:
    """Everything a run of ``observe`` follows from: each step as the in-process run lays it out (the
    local target's config and the digests of its files: generated model.py, the user's module, weights),
    the modules of the step code's folder, the wiring, the payloads, and conch's own code for it.
    Raises ConchError for a declaration the run would refuse (observe() then lets the run report it)."""
    steps = []
    for call in ensemble.calls:
        step = call.step
        model = ensemble.model_name(step)
        try:
            layout = step.layout(model, Target.LOCAL, release, ensemble.name)
        except ConchError as exc:
            exc.within(f"ensemble {ensemble.name!r}")
            raise
        from conch.builder.archive import expand

        files = {rel: digest(src) for rel, src in sorted(expand(layout.files).items()) if not rel.endswith("/")}
        code = getattr(step, "code", None)
        steps.append([model, repr(layout.spec), files, code_digest(code) if code is not None else None,
                      {name: ensemble.tensor_name(h) for name, h in sorted(call.inputs.items())},
                      {name: ensemble.tensor_name(h) for name, h in sorted(call.outputs.items())}])
    request = ensemble.warmup_request
    payloads = {
        "warmup": None if request is None else [request.describe(), request.count,
                                                 _arrays_key(request.resolve(ensemble))],
        "samples": [[s.name, _arrays_key(s.inputs)] for s in ensemble.samples] if measure else None,
    }
    package = Path(__file__).resolve().parent.parent
    own = [digest(package / rel) for rel in _OWN_CODE]
    return key_of([__version__, own, ensemble.name, target.value, str(release), repr(ensemble.spec()),
                   steps, payloads])


def _arrays_key(arrays: dict[str, Any]) -> dict[str, str]:
    return {name: _array_key(np.asarray(array)) for name, array in sorted(arrays.items())}


def _array_key(array: np.ndarray) -> str:
    h = hashlib.sha256(f"{array.dtype.str} {array.shape}".encode())
    if array.dtype.kind == "O":
        for item in array.ravel():
            data = item if isinstance(item, bytes) else str(item).encode()
            h.update(len(data).to_bytes(8, "little") + data)
    else:
        h.update(np.ascontiguousarray(array).tobytes())
    return h.hexdigest()
