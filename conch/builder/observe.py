"""What a build learns by running the ensemble in this process (conch.executor): the tensors each step receives
for the warmup payload, and how large each step's tensors get for the samples (to size shared memory).
Nothing runs when the ensemble declares no warmup and every tensor's size follows from its declaration.

Each step that is a Python model in production runs as SageMaker's stub runs it: in a child process on the
release's image Python (3.10 up to 24.10, 3.12 from 24.11; conch.image_python), with the image's packages and
the step's own environment only, so an import the image cannot satisfy fails the warmup here. Where no
interpreter of that version is found, conch's own runs them with the image's packages and the build says so
(``Observed.python_note``), or fails under ``--strict`` and in CI. The other steps (GPU-less stand-ins) run in
this process.

A run's findings are kept in conch's cache only when every step it runs is pure (``Step.runs_pure``: a
model file run by its framework, conch's stand-ins, or user code declared ``pure=True``), under a key of
everything they follow from (the declaration, each step's local layout with the digests of its files, the
step code's folder and closures, the samples' and the warmup payload's arrays, the target and release,
conch's code, conch's Python and its installed distributions, and the image Python's version and packages),
so an unchanged rebuild runs nothing. Any other
run is made at every build."""

from __future__ import annotations

import base64
import hashlib
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from conch.builder.archive import expand
from conch.builder.buildcache import digest
from conch.builder.pack import pack
from conch.builder.shm_sizing import RowBytes, needs_samples, observe_row_bytes
from conch.builder.warmup_inputs import DerivedWarmup, StepWarmup, derive_warmup
from conch.cache import cache_dir, code_digest, editable_sources, environment, key_of, own_code, read_json, write_json
from conch.compiler.compiled import CompiledEnsemble
from conch.ensembles.config import Warmup, WarmupInput
from conch.ensembles.dtypes import DType
from conch.ensembles.layout import FileSource
from conch.ensembles.target import Target
from conch.errors import BuildError, ConchError, ServeError
from conch.executor import ChildPython, Executor, pb_utils_path
from conch.image_python import (
    find_interpreter,
    image_environment,
    image_requirements,
    other_python,
    probe,
    strict_default,
)
from conch.version import __version__

runs = 0  # in-process runs of observe() in this process (what the cache saves; tests read it)


@dataclass
class Observed:
    """The derived warmup (empty when none is declared) and, per model, the largest bytes per batch row
    seen for each of its tensors over the samples (empty, with the reason, when they could not run)."""

    warmup: DerivedWarmup = field(default_factory=DerivedWarmup)
    row_bytes: RowBytes = field(default_factory=dict)
    unmeasured: str | None = None
    python_note: str = ""  # the Python steps ran on another Python than the image's: what the build says

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


def observe(plan: CompiledEnsemble, refresh: bool = False, digests: Callable[[FileSource], str] = digest) -> Observed:
    """Run the warmup payload and, when sizes must be measured, the samples, with the steps loaded once.
    A warmup that cannot run fails the build; samples that cannot run leave the sizes unmeasured.

    The findings come from the cache when every step is pure and everything they follow from is unchanged
    (``refresh`` runs anyway); findings with unmeasured sizes are not kept, so a fixed environment is tried
    again."""
    request = plan.warmup_request
    measure = needs_samples(plan) and bool(plan.samples)
    if request is None and not measure:
        return Observed()
    try:
        local = plan.local()  # what runs in this process
    except ConchError as exc:  # a step this process cannot lay out: as if it failed to run
        return _unrunnable(plan, exc)
    python, note = image_python(local)
    observed = _observed(plan, local, measure, python, refresh, digests)
    observed.python_note = note
    return observed


def _observed(plan: CompiledEnsemble, local: CompiledEnsemble, measure: bool, python: ChildPython | None,
              refresh: bool, digests: Callable[[FileSource], str]) -> Observed:
    if not all(compiled.step.runs_pure() for compiled in local.steps):  # user code may read anything
        return _run(local, measure, python)
    try:
        key = observation_key(plan.target, local, measure, digests, python)
    except ConchError:  # e.g. a warmup naming no sample: the run below says so, in the build's words
        return _run(local, measure, python)
    if key is None:  # step code that cannot be told by its content
        return _run(local, measure, python)
    where = cache_dir() / "observed" / f"{key[:32]}.json"
    known = None if refresh else read_json(where)
    if isinstance(known, dict):
        try:
            return Observed.from_json(known)
        except (KeyError, TypeError, ValueError, ConchError):  # an older or damaged record: run again
            pass
    observed = _run(local, measure, python)
    if observed.unmeasured is None:
        write_json(where, observed.to_json())
    return observed


def image_python(local: CompiledEnsemble) -> tuple[ChildPython | None, str]:
    """Where the Python steps of ``local`` run (None: in this process, there being none), and the note the build
    gives when that is not the release's image Python. BuildError under ``--strict`` (and CI) then."""
    if not any(compiled.python_in_production for compiled in local.steps):
        return None, ""
    release = local.release
    wanted = release.stub_python
    interpreter = find_interpreter(wanted)
    note = ""
    if interpreter is None:
        here = f"{sys.version_info.major}.{sys.version_info.minor}"
        note = f"the build's observe runs (warmup, shared-memory sizing) {other_python(here, wanted, str(release))}"
        if strict_default():
            raise BuildError(f"ensemble {local.name!r}: {note}; --strict (and CI) refuse to run the Python steps on "
                             "another Python than the image's")
        interpreter = probe(sys.executable, "conch's")
        if interpreter is None:  # no shared libpython is fine for a child, not for the probe: run them here
            return None, note
    try:
        environment = image_environment(interpreter, tuple(sorted(image_requirements(release))))  # the replay's too
    except ServeError as exc:  # e.g. no package index here: the build runs them in this process, and says so
        note = (f"the build's observe runs (warmup, shared-memory sizing) ran the Python steps in conch's process: "
                f"the environment of Triton {release}'s image Python could not be built ({exc})")
        if strict_default():
            raise BuildError(f"ensemble {local.name!r}: {note}; --strict (and CI) refuse to run the Python steps "
                             "otherwise than as the image runs them") from exc
        return None, note
    environments = {}
    for compiled in local.steps:
        if compiled.python_in_production and compiled.env is not None:
            try:  # packed for the release's Python as the build packs it (from the cache then)
                folder = pack(compiled.env, wanted).folder  # the bytes both targets ship
            except ConchError:  # the build names it when it packs; the step runs in this process meanwhile
                continue
            environments[compiled.model_name] = tuple(str(p) for p in sorted(folder.glob("lib/python*/site-packages")))
    return ChildPython(environment / "bin" / "python", interpreter.version, str(release), pb_utils_path(),
                       environments), note


def _unrunnable(plan: CompiledEnsemble, exc: ConchError) -> Observed:
    """What observe finds when the local plan cannot be made: a warmup fails the build, sizes stay unmeasured."""
    global runs

    runs += 1
    request = plan.warmup_request
    if request is not None:
        raise BuildError(f"ensemble {plan.name!r}: warmup from {request.describe()}: running it failed: {exc}") from exc
    return Observed(unmeasured=f"running the samples failed: {exc}")


def _run(local: CompiledEnsemble, measure: bool, python: ChildPython | None = None) -> Observed:
    global runs

    runs += 1
    request = local.warmup_request
    observed = Observed()
    with Executor(local, python=python) as executor:
        if request is not None:
            try:
                result = executor.run(request.resolve(local), intermediates=True)
            except ConchError as exc:
                raise BuildError(f"ensemble {local.name!r}: warmup from {request.describe()}: running it failed: "
                                 f"{exc}") from exc
            observed.warmup = derive_warmup(local, request, result)
        if measure:
            try:
                results = [executor.run(s.inputs, intermediates=True) for s in local.samples]
            except ConchError as exc:
                observed.unmeasured = f"running the samples failed: {exc}"
            else:
                observed.row_bytes = observe_row_bytes(local, results)
    return observed


def observation_key(target: Target, local: CompiledEnsemble, measure: bool,
                    digests: Callable[[FileSource], str] = digest, python: ChildPython | None = None) -> str | None:
    """Everything a run of ``observe`` follows from: each step as the in-process run lays it out (the
    local target's config and the digests of its files: generated model.py, the user's module, weights),
    the modules of the step code's folder, the wiring, the payloads, conch's own code, conch's Python and its
    installed distributions, and the Python the Python steps run on (its version and the image environment's
    packages, ``pins.json``). None when a step's code cannot be told by content (``cache.code_digest``: e.g.
    a module imported before an edit of its file runs its old code, which the file's digest does not stand for).
    Raises ConchError for a payload the run would refuse (observe() then lets the run report it)."""
    steps = []
    for compiled in local.steps:
        layout = compiled.layout
        files = {rel: digests(src) for rel, src in sorted(expand(layout.files).items()) if not rel.endswith("/")}
        code = getattr(compiled.step, "code", None)
        told = None if code is None else code_digest(code)
        if code is not None and told is None:
            return None
        steps.append([compiled.model_name, repr(layout.spec), files, told, dict(compiled.inputs),
                      dict(compiled.outputs)])
    request = local.warmup_request
    payloads = {
        "warmup": None if request is None else [request.describe(), request.count,
                                                 _arrays_key(request.resolve(local))],
        "samples": [[s.name, _arrays_key(s.inputs)] for s in local.samples] if measure else None,
    }
    return key_of([__version__, own_code(), environment(), editable_sources(), local.name, target.value,
                   str(local.release), repr(local.spec), steps, payloads, _python_key(python)])


def _python_key(python: ChildPython | None) -> object:
    """The child Python's version and what its image environment holds (None: the steps run in this process)."""
    if python is None:
        return None
    pins = json.loads((python.executable.parent.parent / "pins.json").read_text())
    return [pins["python"], pins["pins"], sorted(python.environments.items())]


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
