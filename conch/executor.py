"""Run an ensemble's DAG inside this process, no server: every step runs the code its local stand-in runs
in Triton (the generated Python-backend ``model.py`` of the local target, imported here), in wiring order,
and every tensor is kept for inspection and checked against what the declaration says."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from conch.cache import drop_racy_bytecode
from conch.compiler.compiled import CompiledEnsemble, CompiledStep, compile_ensemble
from conch.compiler.config_reader import read_config
from conch.compiler.pbtxt import check_config, render_config
from conch.ensembles.dtypes import DType
from conch.ensembles.ensemble import Ensemble, register_run
from conch.ensembles.run_result import RunResult, StepTrace
from conch.ensembles.target import DEFAULT_RELEASE, Release, Target
from conch.ensembles.tensors import Tensor, dims_compatible
from conch.errors import ConchError, DeclarationError, RunError
from conch.executor_child import ChildFailure, ChildModel, ChildPython
from conch.model_worker import ContractError, load_model
from conch.scratch import scratch_dir
from conch.stub_types import STUB_TYPES
from conch.triton_wheel import pytriton_paths

PB_UTILS = "triton_python_backend_utils"
TRACEBACK = "\nTraceback (most recent call last):"

__all__ = ["ChildPython", "Executor", "RunResult", "StepTrace", "run", "sample_inputs"]


class Executor:
    """Loads each step once (its ``initialize``/``setup`` runs on first use) and runs payloads through
    the DAG; ``close()`` calls every step's ``finalize``/``teardown``. Python steps run in this
    interpreter, whatever environment they declare for Triton.

    Args:
        ensemble: the declared ensemble (compiled here for the local target, as a build would: validated,
            every step checked), or a plan compiled for the local target.
        release: the release the steps are checked against (it does not change what runs here); a
            compiled plan brings its own.
        python: where the steps that are Python models in production run instead of this process: one child
            process each on that interpreter (the build's observe runs: the release's image Python), all
            started here.
    """

    def __init__(self, ensemble: Ensemble | CompiledEnsemble, *, release: Release | str = DEFAULT_RELEASE,
                 python: ChildPython | None = None) -> None:
        if isinstance(ensemble, Ensemble):
            ensemble = compile_ensemble(ensemble, Target.LOCAL, release)
        self.plan = ensemble.local()
        self.release = self.plan.release
        self._workdir = Path(tempfile.mkdtemp(prefix="conch-run-", dir=scratch_dir()))
        self._models: dict[str, Any] = {}
        self._children: dict[str, ChildModel] = {}
        try:
            for compiled in self.plan.steps:
                if python is not None and python.runs(compiled):  # started together: interpreters start side by side
                    folder, config = self._laid_out(compiled)
                    self._children[compiled.model_name] = ChildModel(
                        python, folder, latest_version(folder), compiled, config_json(compiled.model_name, config),
                        f"ensemble {self.plan.name!r}, step {compiled.step.name!r} ({compiled.step.kind})")
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        models, self._models = self._models, {}
        for name, child in self._children.items():
            if name not in models:  # started, never used
                child.finalize()
        self._children = {}
        workdir = str(self._workdir)
        sys.path[:] = [p for p in sys.path if not p.startswith(workdir)]  # the models' folders, added at load
        try:
            for model in models.values():
                finalize = getattr(model, "finalize", None)  # optional in Triton's contract
                if finalize is not None:
                    finalize()
        finally:
            shutil.rmtree(self._workdir, ignore_errors=True)

    def run(
        self,
        inputs: Mapping[str, Any],
        *,
        intermediates: bool = False,
        strict: bool = True,
        on_step: Callable[[StepTrace], None] | None = None,
    ) -> RunResult:
        """Run one request (arrays include the batch dimension when the ensemble batches).

        With ``strict`` a step whose outputs disagree with its declared dtype or dims raises RunError;
        otherwise the disagreement is recorded in the step's trace and the run goes on. ``on_step`` sees
        each step's trace as soon as the step has run.
        """
        plan = self.plan
        ens = plan.ensemble
        tensors: dict[int, np.ndarray] = {}
        payload = plan.payload(inputs, f"ensemble {plan.name!r} run")
        for name, handle in ens.inputs.items():
            if name in payload:
                tensors[id(handle)] = payload[name]
        traces = []
        for compiled in plan.steps:
            trace = self._run_step(compiled, tensors)
            traces.append(trace)
            if on_step is not None:
                on_step(trace)
            if strict and trace.problems:
                raise RunError("; ".join(trace.problems))
            if not intermediates:
                trace.inputs, trace.outputs = {}, {}
        outputs = {name: tensors[id(h)] for name, h in ens.outputs.items()}
        named: dict[str, np.ndarray] = {}
        if intermediates:
            handles = [*ens.inputs.values(), *(h for c in ens.calls for h in c.outputs.values())]
            named = {plan.tensor_name(h): tensors[id(h)] for h in handles if id(h) in tensors}
        return RunResult(plan.name, outputs, named, traces)

    def _run_step(self, compiled: CompiledStep, tensors: dict[int, np.ndarray]) -> StepTrace:
        call, step = compiled.call, compiled.step
        where = f"ensemble {self.plan.name!r}, step {step.name!r} ({step.kind})"
        model = self._model(compiled)
        routed = {name: tensors[id(h)] for name, h in call.inputs.items() if id(h) in tensors}
        specs = {t.name: t for t in step.inputs}
        arrays = {name: _delivered(array, specs[name]) for name, array in routed.items()}
        start = time.perf_counter()
        produced = _execute(model, arrays, [t.name for t in step.outputs], compiled.model_name, where,
                            f"step {step.name!r} of ensemble {self.plan.name!r} ")
        millis = (time.perf_counter() - start) * 1000
        outputs: dict[str, np.ndarray] = {}
        problems: list[str] = []
        for spec in step.outputs:
            if spec.name not in produced:
                raise RunError(f"{where}: its response has no output {spec.name!r} (it has "
                               f"{sorted(produced) or 'none'}); return one pb_utils.Tensor per declared output")
            array, problem = _presented(produced[spec.name], spec, step.max_batch_size > 0)
            outputs[spec.name] = array
            if problem:
                problems.append(f"{where}: output {spec.name!r} {problem}")
            handle = call.outputs.get(spec.name)
            if handle is not None:
                tensors[id(handle)] = array
        return StepTrace(step.name, step.kind, compiled.model_name, routed, outputs, millis, problems)

    def _model(self, compiled: CompiledStep) -> Any:
        """The step's generated model.py, laid out as the local target lays it out, imported and initialized
        (in its child process, for a step that runs in one)."""
        step, name = compiled.step, compiled.model_name
        if name in self._models:
            return self._models[name]
        if name in self._children:
            self._models[name] = self._children[name].loaded()
            return self._models[name]
        folder, config = self._laid_out(compiled)
        version = latest_version(folder)
        try:
            instance = load_python_model(folder, version, name, config, f"conch_run_{len(self._models)}_{name}")
        except ConchError:
            raise
        except Exception as exc:
            raise RunError(
                f"ensemble {self.plan.name!r}, step {step.name!r} ({step.kind}): loading it failed: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        self._models[name] = instance
        return instance

    def _laid_out(self, compiled: CompiledStep) -> tuple[Path, str]:
        """The step's model folder as the local target lays it out, written under the run's folder, and its
        config.pbtxt text."""
        step, name, layout = compiled.step, compiled.model_name, compiled.layout
        try:
            config = render_config(layout.spec)
        except ConchError as exc:
            exc.within(f"ensemble {self.plan.name!r}")
            raise
        if layout.spec.backend != "python":
            raise RunError(
                f"ensemble {self.plan.name!r}, step {step.name!r} ({step.kind}): has no CPU path to run in "
                "this process (its local layout is not a Python-backend model)"
            )
        folder = self._workdir / name
        for rel, source in layout.files.items():
            path = folder / rel  # a Path drops the trailing "/" that marks a folder entry: test ``rel``
            if rel.endswith("/"):
                path.mkdir(parents=True, exist_ok=True)
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(source, bytes):
                path.write_bytes(source)
            else:
                path.symlink_to(Path(source).resolve())
        return folder, config


def latest_version(folder: Path) -> str:
    """The version folder Triton loads by default (version policy ``latest``): the highest number holding model.py."""
    versions = [int(p.parent.name) for p in folder.glob("*/model.py") if p.parent.name.isdigit()]
    return str(max(versions, default=1))


def load_python_model(folder: Path, version: str, name: str, config: str, module_name: str) -> Any:
    """A Python-backend model as the stub loads it (``conch.model_worker.load_model``), in this process.
    ``config`` is the model's config.pbtxt text."""
    try:
        return load_model(str(folder), version, name, config_json(name, config), module_name,
                          lambda path, module: _import_model(Path(path), module))
    except ContractError as exc:
        raise RunError(str(exc)) from None


def config_json(name: str, config: str) -> str:
    """Triton's JSON of the whole config (its contract with initialize), through the typed reader; check_config
    parses a rendered text once per process (a build renders, then runs it)."""
    return json.dumps(read_config(check_config(config, name), where=f"{name}/config.pbtxt").triton_json())


def _execute(model: Any, arrays: Mapping[str, np.ndarray], outputs: list[str], name: str, where: str,
             said_by: str) -> dict[str, np.ndarray]:
    """One request through ``execute`` as Triton makes it: a list of one request in, a list of one response out.
    ``said_by``: how conch's generated model.py starts the errors it answers with ("step 'x' of ensemble 'e' ")."""
    utils = _utils()
    if hasattr(model, "check_dims"):  # conch's generated model.py: the run reports dims its own way
        model.check_dims = False
    try:
        responses = model.execute([utils.InferenceRequest(arrays, outputs, name)])
    except ChildFailure as exc:
        raise RunError(f"{where}{exc}") from None
    except Exception as exc:
        raise RunError(f"{where} raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(responses, list | tuple) or len(responses) != 1:
        raise RunError(f"{where}: execute() must return a list of one pb_utils.InferenceResponse per request; "
                       f"for one request it returned {type(responses).__name__}"
                       + (f" of {len(responses)}" if isinstance(responses, list | tuple) else ""))
    response = responses[0]
    if not isinstance(response, utils.InferenceResponse):
        raise RunError(f"{where}: execute() returned {type(response).__name__} for a request; answer each request "
                       "with a pb_utils.InferenceResponse")
    if response.has_error():
        message = response.error().message().split(TRACEBACK, 1)[0].rstrip()  # the model's stack: not the run's
        if message.startswith(said_by):  # conch's generated model.py names the step itself: said once
            raise RunError(f"{where} {message[len(said_by):]}")
        raise RunError(f"{where} answered with an error: {message}")
    return {tensor.name(): tensor.as_numpy() for tensor in response.output_tensors()}


def run(
    ensemble: Ensemble,
    inputs: Mapping[str, Any],
    *,
    intermediates: bool = False,
    strict: bool = True,
    release: Release | str = DEFAULT_RELEASE,
) -> RunResult:
    """Run one request through an ensemble in this process (loads every step, runs, unloads them);
    use an :class:`Executor` to run many requests with the steps loaded once."""
    with Executor(ensemble, release=release) as executor:
        return executor.run(inputs, intermediates=intermediates, strict=strict)


register_run(run)  # the deprecated Ensemble.run calls conch.run, without importing this layer


def sample_inputs(ensemble: Ensemble, name: str) -> dict[str, np.ndarray]:
    """The inputs of one of the ensemble's samples, by name."""
    for sample in ensemble.samples:
        if sample.name == name:
            return sample.inputs
    names = ", ".join(repr(s.name) for s in ensemble.samples) or "none"
    raise DeclarationError(f"ensemble {ensemble.name!r} has no sample {name!r}; its samples are {names}")


def _delivered(array: np.ndarray, spec: Tensor) -> np.ndarray:
    """What Triton hands a model: its own copy, reshaped when the config says ``reshape``."""
    array = np.array(array, copy=True)
    if spec.reshape is not None and array.ndim:
        lead = array.shape[: array.ndim - len(spec.dims)]
        array = array.reshape(*lead, *spec.reshape)
    return array


def _presented(array: np.ndarray, spec: Tensor, batching: bool) -> tuple[np.ndarray, str | None]:
    """A produced output as the next model sees it, and how it disagrees with its declaration, if it does."""
    array = np.asarray(array)
    if array.dtype.kind in ("O", "S", "U"):  # Triton serializes BYTES; consumers get bytes objects
        array = np.vectorize(lambda v: v.encode() if isinstance(v, str) else bytes(v), otypes=[object])(array)
    lead = (-1,) if batching else ()
    if spec.reshape is not None and dims_compatible(lead + spec.reshape, array.shape):
        array = array.reshape(*array.shape[: len(lead)], *spec.dims)
    try:
        produced = DType.of(array.dtype)
    except DeclarationError:
        return array, f"is declared {spec.dtype.wire} but the step produced numpy {array.dtype}, no Triton dtype"
    if produced is not spec.dtype:
        return array, f"is declared {spec.dtype.wire} but the step produced {produced.wire}; fix the declaration"
    if not dims_compatible(lead + spec.dims, array.shape):
        full = list(lead + spec.dims)
        return array, (f"is declared with shape {full} (dims {list(spec.dims)}) but the step produced shape "
                       f"{list(array.shape)}; fix the declared dims (-1 for a size that varies)")
    return array, None


def _import_model(path: Path, module_name: str) -> ModuleType:
    """Import a model.py; it imports Triton's own triton_python_backend_utils, as in the stub."""
    _utils()
    return _import_file(path, module_name)


def _utils() -> ModuleType:
    """Triton's own triton_python_backend_utils with what the stub adds to it from C++, imported once."""
    if PB_UTILS not in sys.modules:
        utils = _import_file(pb_utils_path(), PB_UTILS, "; reinstall nvidia-pytriton")
        for name, kind in STUB_TYPES.items():  # the stub adds these from C++
            if not hasattr(utils, name):
                setattr(utils, name, kind)
        sys.modules[PB_UTILS] = utils
    return sys.modules[PB_UTILS]


def pb_utils_path() -> Path:
    """Triton's triton_python_backend_utils.py, from the pytriton wheel's python backend."""
    return pytriton_paths()[0] / "backends" / "python" / f"{PB_UTILS}.py"


def _import_file(path: Path, module_name: str, fix: str = "") -> ModuleType:
    drop_racy_bytecode([path])  # a model.py built again within the second
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise RunError(f"cannot import {path}{fix}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
