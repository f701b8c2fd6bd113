"""TensorRT steps (``tensorrt_plan``, ``1/model.plan``): a prebuilt plan, or an ONNX model compiled with
TensorRT's Python API on a GPU host; locally the ONNX source under ONNX Runtime.

A plan is an engine for one TensorRT version and GPU architecture, so it can be neither built nor read
without a GPU. Where TensorRT cannot run, conch says so: a production build that has to compile fails
with what to do instead, and a plan without its ONNX source has no CPU stand-in for the local target.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from typing_extensions import Unpack

from conch.backends.artifact import Artifact
from conch.backends.onnx import read_onnx_io
from conch.backends.python import PythonStep
from conch.backends.standins.onnxruntime_runner import OnnxRuntimeRunner
from conch.cache import cached_file
from conch.ensembles.backends_table import default_file
from conch.ensembles.config import SettingsArgs, StepSettings
from conch.ensembles.dtypes import DType
from conch.ensembles.layout import Platform
from conch.ensembles.step import BackendFiles, ModelIO, Step, check_against_file, positional_io, renamed_source
from conch.ensembles.target import Release
from conch.ensembles.tensors import Tensor
from conch.errors import BuildError, ConchError, DeclarationError

FILENAME = default_file(Platform.TENSORRT_PLAN)  # its default model file (ensembles/backends_table.py)
WORKSPACE_BYTES = 1 << 30


def _tensorrt() -> tuple[Any, str]:
    """The tensorrt module, or None with the reason it cannot be imported."""
    try:
        import tensorrt
    except Exception as exc:  # ImportError, or an OSError from missing libnvinfer
        return None, f"import tensorrt failed: {type(exc).__name__}: {exc}"
    return tensorrt, ""


@dataclass(frozen=True)
class EngineTensor:
    """One I/O tensor of a deserialized engine; ``max_batch`` is the profile's largest first dim."""

    name: str
    is_input: bool
    dtype: DType | None
    shape: tuple[int, ...]
    max_batch: int | None


def tensorrt_major(release: Release) -> int:
    """The TensorRT major version in a release's container: 8.5/8.6 up to 24.04, 10.x from 24.05. A plan
    runs only on the TensorRT that built it."""
    return 8 if release < Release(24, 5) else 10


def check_version(version: str, step: str, release: Release) -> int:
    """The major version of this host's TensorRT, if it is the one the release's Triton runs."""
    major = int(version.split(".")[0])
    if major != tensorrt_major(release):
        raise BuildError(
            f"tensorrt step {step!r}: this host has TensorRT {version}, but Triton {release} runs TensorRT "
            f"{tensorrt_major(release)}.x, which cannot load a plan built by another version. Compile in "
            f"nvcr.io/nvidia/tritonserver:{release}-py3, or build for a release whose TensorRT is {major}.x"
        )
    return major


def _collecting_logger(trt: Any) -> Any:
    """A TensorRT logger that keeps warnings and errors, so a failure can say what TensorRT said."""

    class Collecting(trt.ILogger):
        def __init__(self) -> None:
            trt.ILogger.__init__(self)
            self.messages: list[str] = []

        def log(self, severity: Any, msg: str) -> None:
            if int(severity) <= int(trt.ILogger.Severity.WARNING):
                self.messages.append(str(msg))

    return Collecting()


def _said(logger: Any) -> str:
    messages = getattr(logger, "messages", [])
    return f": {'; '.join(messages)}" if messages else ""


def inspect_plan(plan: bytes) -> tuple[list[EngineTensor] | None, str]:
    """The I/O of a plan, or None and why it cannot be read: without tensorrt or a GPU (as on the build
    machines conch is tested on) an engine cannot be deserialized, nor one built by another TensorRT
    version or for another GPU; a prebuilt plan's names, dtypes and batch size are then taken from the
    declaration unchecked."""
    trt, reason = _tensorrt()
    if trt is None:
        return None, f"TensorRT cannot run here ({reason})"
    logger = _collecting_logger(trt)
    try:
        engine = trt.Runtime(logger).deserialize_cuda_engine(plan)
    except Exception as exc:  # no CUDA device or driver
        return None, f"TensorRT {trt.__version__} cannot run here ({type(exc).__name__}: {exc})"
    if engine is None:
        return None, f"TensorRT {trt.__version__} here cannot read it{_said(logger)}"
    found = []
    for i in range(engine.num_io_tensors):
        name = engine.get_tensor_name(i)
        is_input = engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT
        try:
            dtype: DType | None = DType.of(trt.nptype(engine.get_tensor_dtype(name)))
        except (ConchError, TypeError):  # BF16, FP8: no numpy type, so Triton has no TYPE_ for them either
            dtype = None
        shape = tuple(int(d) for d in engine.get_tensor_shape(name))
        max_batch = None
        if is_input and shape and shape[0] == -1:
            max_batch = int(engine.get_tensor_profile_shape(name, 0)[2][0])
        found.append(EngineTensor(name, is_input, dtype, shape, max_batch))
    return found, ""


def profile_shapes(
    step: str, inputs: Sequence[Tensor], max_batch_size: int, max_dims: Mapping[str, Sequence[int]]
) -> dict[str, tuple[list[int], list[int], list[int]]]:
    """(min, opt, max) shapes per input for one optimization profile: the batch axis from 1 to
    max_batch_size (optimised for the largest batch), each -1 dim from 1 to its ``max_dims`` size."""
    shapes = {}
    for t in inputs:
        limits = list(max_dims.get(t.name, t.dims))
        if len(limits) != len(t.dims):
            raise BuildError(
                f"tensorrt step {step!r}: max_dims[{t.name!r}] is {limits}, but input {t.name!r} has dims "
                f"{list(t.dims)}; give one size per dim"
            )
        low, high = [], []
        for d, limit in zip(t.dims, limits, strict=True):
            if d == -1 and limit == -1:
                raise BuildError(
                    f"tensorrt step {step!r}: input {t.name!r} has dims {list(t.dims)}; compiling needs the "
                    f"largest size of each -1 dim, e.g. max_dims={{{t.name!r}: [...]}}"
                )
            low.append(1 if d == -1 else d)
            high.append(limit if d == -1 else d)
        batch = [max_batch_size] if max_batch_size > 0 else []
        shapes[t.name] = ([1] * len(batch) + low, batch + high, batch + high)
    return shapes


def compile_plan(
    onnx: bytes,
    step: str,
    shapes: Mapping[str, tuple[list[int], list[int], list[int]]],
    fp16: bool,
    release: Release,
) -> tuple[bytes, str]:
    """Build a serialized engine from ONNX bytes with TensorRT's Python API: (plan, TensorRT version)."""
    trt, reason = _tensorrt()
    builder = logger = None
    if trt is not None:
        try:
            logger = _collecting_logger(trt)
            builder = trt.Builder(logger)
        except Exception as exc:  # no CUDA device or driver
            reason = f"TensorRT cannot start a builder: {type(exc).__name__}: {exc}"
    if builder is None:
        reason = reason or "TensorRT created no builder: no CUDA device?"
        raise BuildError(
            f"tensorrt step {step!r}: compiling model.onnx into a TensorRT plan needs an NVIDIA GPU and the "
            f"tensorrt Python package, which this machine lacks ({reason}). Build on a GPU host "
            f"with the TensorRT of Triton {release} (e.g. in nvcr.io/nvidia/tritonserver:{release}-py3), or "
            "pass plan= with a model.plan prebuilt there (trtexec --onnx=model.onnx --saveEngine=model.plan). "
            "The local target needs no plan: it runs the ONNX source under ONNX Runtime"
        )
    version = str(trt.__version__)
    major = check_version(version, step, release)
    # TensorRT 10 networks are always explicit-batch (the flag is deprecated and ignored); 8.x needs it.
    flags = 0 if major >= 10 else 1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse(onnx):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise BuildError(f"tensorrt step {step!r}: TensorRT {version} cannot parse model.onnx: {errors}")
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, WORKSPACE_BYTES)
    if fp16:
        config.set_flag(trt.BuilderFlag.FP16)
    profile = builder.create_optimization_profile()
    for i in range(network.num_inputs):
        name = network.get_input(i).name
        if name not in shapes:
            raise BuildError(f"tensorrt step {step!r}: model.onnx has input {name!r}, which the step does not "
                             f"declare; declare every input of the ONNX model (or leave inputs out to read them "
                             f"from the model)")
        profile.set_shape(name, *shapes[name])
    config.add_optimization_profile(profile)
    plan = builder.build_serialized_network(network, config)
    if plan is None:
        raise BuildError(
            f"tensorrt step {step!r}: TensorRT {version} could not build an engine from model.onnx{_said(logger)}"
        )
    return bytes(plan), version


def _is_plan(source: Any) -> bool:
    """Whether the model given as a TensorRT step's source is a prebuilt plan (bytes, a ``.plan`` file) rather
    than the ONNX model."""
    return isinstance(source, bytes) or (isinstance(source, str | Path) and Path(source).suffix == ".plan")


class TensorRTStep(Step):
    """A TensorRT engine run by Triton's TensorRT backend.

    ``TensorRTStep(name, model)``: ``model`` is the model's ONNX file (or a function returning its path), or a
    prebuilt plan (bytes, or a ``.plan`` file); ``plan=`` gives a prebuilt plan beside the ONNX model (the ONNX
    model then runs locally; the plan is what production serves). Given as ``plan=`` alone, a function
    returning a plan is taken too. With only the ONNX model, a production build
    compiles the plan with TensorRT (on a GPU host; one optimization profile from ``max_batch_size``,
    the declared dims and ``max_dims`` for -1 dims; ``fp16=True`` allows half precision). The ONNX source
    is also what the local target runs, under ONNX Runtime: a plan alone has no CPU stand-in.
    Inputs and outputs are read from the ONNX file when given; declare them otherwise.
    """

    kind = "tensorrt"
    platform = Platform.TENSORRT_PLAN
    standin_runs = "its ONNX source under ONNX Runtime"
    io_source = "the ONNX source"
    local_info: ClassVar[Mapping[str, object]] = {"plan": "not built (local target)"}

    def __init__(
        self,
        name: str,
        source: Any = None,
        *legacy: Sequence[Tensor],
        inputs: Sequence[Tensor] | None = None,
        outputs: Sequence[Tensor] | None = None,
        max_batch_size: int = 0,
        plan: Any = None,
        fp16: bool = False,
        max_dims: Mapping[str, Sequence[int]] | None = None,
        onnx: Any = None,
        **options: Unpack[SettingsArgs],
    ) -> None:
        inputs, outputs = positional_io("TensorRTStep", legacy, inputs, outputs)
        if _is_plan(source):
            if plan is not None:
                raise DeclarationError(f"tensorrt step {name!r}: give the plan once, as the second argument or as "
                                       "plan= beside an ONNX model")
            source, plan = None, source
        onnx = renamed_source("TensorRTStep", "onnx", onnx, source)
        settings = StepSettings.of(max_batch_size, what=f"tensorrt step {name!r}", **options)
        if plan is None and onnx is None:
            raise DeclarationError(
                f"tensorrt step {name!r}: give its model as the second argument: the ONNX model (compiled into a "
                "plan, and run locally) or a prebuilt plan (bytes or a .plan file); plan= adds a prebuilt plan "
                "beside the ONNX model"
            )
        what = f"tensorrt step {name!r}"
        self.plan = None if plan is None else Artifact(plan, what=what, filename=FILENAME)
        self.onnx = None if onnx is None else Artifact(onnx, what=what, filename="model.onnx")
        super().__init__(name, inputs, outputs, settings)
        self.fp16 = fp16
        self.max_dims = {k: tuple(int(d) for d in v) for k, v in (max_dims or {}).items()}
        unknown = sorted(set(self.max_dims) - {t.name for t in self.inputs})
        if unknown:
            raise DeclarationError(f"tensorrt step {name!r}: max_dims names {unknown}, which are not inputs")

    def _onnx_path(self) -> Path:
        assert self.onnx is not None
        source = self.onnx.resolve()
        if isinstance(source, bytes):
            raise BuildError(f"tensorrt step {self.name!r}: its ONNX source must be a file path (a function gave "
                             "bytes); return the .onnx file's path")
        return source

    def io_unreadable(self) -> str | None:
        if self.onnx is None:
            return "a plan cannot be read here"
        return "onnx is a function" if self.onnx.deferred else None

    def model_io(self, declared: Sequence[Tensor]) -> ModelIO | None:
        """The I/O of the ONNX source (a plan cannot be read without a GPU; see ``_check_engine``)."""
        if self.onnx is None:
            return None
        path = self._onnx_path()
        return ModelIO(path.name, *read_onnx_io(path, self.max_batch_size > 0, self.name))

    def check(self, release: Release) -> None:
        super().check(release)
        if self.onnx is not None and self.plan is None:
            profile_shapes(self.name, self.inputs, self.max_batch_size, self.max_dims)

    def details(self) -> dict[str, object]:
        return {"fp16": self.fp16, "onnx_source": self.onnx is not None}

    def backend_files(self, model_name: str, release: Release, ensemble: str) -> BackendFiles:
        """The prebuilt plan, or the plan compiled from ONNX, checked against the declaration when this
        host's TensorRT can read it."""
        built: dict[str, object]
        if self.plan is not None:
            plan_file = self.plan.resolve()
            plan = self.plan.data()
            built = {"plan": "prebuilt", "tensorrt_version": None}
        else:
            plan_file, version = self._compiled(release)
            plan = plan_file.read_bytes()
            built = {"plan": "compiled from onnx", "tensorrt_version": version}
        engine, why = inspect_plan(plan)
        notes: tuple[str, ...] = ()
        if engine is None:
            notes = (f"{model_name}: {FILENAME} was not inspected ({why}); its tensor names, dtypes and max batch "
                     "size are taken from the declaration",)
        else:
            self._check_engine(engine, release)
        return BackendFiles({f"1/{FILENAME}": plan_file}, notes, {**built, "inspected": engine is not None})

    def _compiled(self, release: Release) -> tuple[Path, str]:
        """The plan compiled from ONNX, cached: TensorRT picks kernels by timing, so two compilations
        differ byte-wise; the cache makes rebuilds on one host byte-identical. Plans are specific to a GPU
        architecture, so compile on the instance family you deploy to."""
        assert self.onnx is not None
        onnx = self.onnx.data()
        shapes = profile_shapes(self.name, self.inputs, self.max_batch_size, self.max_dims)
        trt, _ = _tensorrt()
        if trt is not None:  # a cached plan of another TensorRT is as wrong as a fresh one
            check_version(str(trt.__version__), self.name, release)
        options = json.dumps({"shapes": shapes, "fp16": self.fp16, "trt": getattr(trt, "__version__", None)},
                             sort_keys=True)
        key = hashlib.sha256(onnx + options.encode()).hexdigest()[:24]
        versions: list[str] = []

        def produce(path: Path) -> None:
            plan, version = compile_plan(onnx, self.name, shapes, self.fp16, release)
            versions.append(version)
            path.write_bytes(plan)

        path = cached_file("tensorrt-plans", key, FILENAME, produce)
        return path, versions[0] if versions else str(getattr(trt, "__version__", "unknown"))

    def _check_engine(self, engine: list[EngineTensor], release: Release) -> None:
        """Declared names and dtypes against the engine (its shapes are the profile's, so only the dtypes and
        names are compared), and max_batch_size against its profile."""
        for what, declared, is_input in (("input", self.inputs, True), ("output", self.outputs, False)):
            by_name = {t.name: t for t in declared}
            found = [e for e in engine if e.is_input is is_input]
            for e in found:
                t = by_name.get(e.name)
                if t is not None and e.dtype is DType.INT32 and t.dtype is DType.INT64 and tensorrt_major(release) < 10:
                    raise BuildError(
                        f"tensorrt step {self.name!r}: {what} {t.name!r} is INT64, which TensorRT 8 (Triton "
                        f"{release}) does not have: {FILENAME} takes it as INT32. Export the ONNX model with INT32 "
                        "I/O (and declare it INT32), or target release 24.05 or later (TensorRT 10)"
                    )
            as_tensors = [_as_declared(e, by_name.get(e.name)) for e in found]
            check_against_file(self.name, what, declared, as_tensors, FILENAME)
            for e in found:
                if self.max_batch_size > 0 and e.max_batch is not None and e.max_batch < self.max_batch_size:
                    raise BuildError(
                        f"tensorrt step {self.name!r}: max_batch_size is {self.max_batch_size} but {FILENAME}'s "
                        f"optimization profile takes batches of at most {e.max_batch} for input {e.name!r}; "
                        "lower max_batch_size or rebuild the plan"
                    )

    def standin(self) -> PythonStep:
        """The ONNX source under ONNX Runtime on the CPU, as a Python-backend model with the same I/O."""
        if self.onnx is None:
            raise BuildError(
                f"tensorrt step {self.name!r} has no CPU stand-in: it is given only a prebuilt plan, which runs "
                "only on a GPU with TensorRT; give the model's ONNX source as the second argument (and the plan "
                "as plan=) so the local target runs it under ONNX Runtime (or replay on a GPU host)"
            )
        return PythonStep.standin_for(self, OnnxRuntimeRunner, {"model.onnx": self._onnx_path()})


def _as_declared(found: EngineTensor, declared: Tensor | None) -> Tensor:
    """An engine tensor with the declared dims (a plan's shapes are its profile's, not comparable), and the
    declared dtype where the engine's has no Triton type."""
    if declared is None:
        return Tensor(found.name, found.dtype or DType.FP32, [1])
    shape = declared.reshape if declared.reshape is not None else declared.dims
    return Tensor(found.name, found.dtype or declared.dtype, shape)
