"""DALI steps (``backend: "dali"``, ``1/model.dali`` or an autoserialized ``1/dali.py``); locally the same
pipeline on the CPU through the nvidia-dali wheel, its GPU operators swapped for their CPU versions.

A pipeline is serialized with ``device_id=None``, which works without a GPU even with ``mixed``
decoders (the server supplies the device), and with DALI's operator-origin tracing off, which would
otherwise write each operator's absolute source path, line and text into the file.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib
import importlib.util
import inspect
import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from typing_extensions import Unpack

from conch.backends import dali_serialized
from conch.backends.artifact import Artifact
from conch.backends.python import PythonStep
from conch.backends.standins.dali_runner import DaliRunner
from conch.cache import cached_file, key_of, own_code, pure_key, refreshed_key, remembered
from conch.ensembles.backends_table import default_file
from conch.ensembles.config import SettingsArgs, StepSettings
from conch.ensembles.dtypes import DType
from conch.ensembles.layout import Platform
from conch.ensembles.step import BackendFiles, Step, positional_io, pure_flag, renamed_source
from conch.ensembles.target import Release
from conch.ensembles.tensors import Tensor, dims_compatible, whole
from conch.errors import BuildError, ConchError, DeclarationError
from conch.templates import render

FILENAME = default_file(Platform.DALI)  # its default model file (ensembles/backends_table.py)
_PROBE_SIZE = 8  # each -1 of a probe input
_REMEMBERED_FORMAT = 1  # bump when what serialize_pipeline or the CPU check does changes
_DALI_WHEELS = ("nvidia-dali-cuda120", "nvidia-dali-cuda130", "nvidia-dali-cuda110", "nvidia-dali")


def _cause(exc: Exception) -> str:
    """DALI's error on one line: the operator and the reason, without the "Critical error" header, the
    assertion's C++ expression and the C++ context that follow."""
    text = ""
    for line in str(exc).splitlines():
        line = " ".join(line.split())
        if line.startswith(("C++ context:", "Current pipeline object")):
            break
        if not line or (line.startswith("Critical error") and line.endswith(":")):
            continue
        line = re.sub(r'^Assert on ".*" failed: ', "", line)
        text += line + (" " if line.endswith(":") else "; ")
    return text.rstrip("; ") or type(exc).__name__


def probe_sample(t: Tensor) -> np.ndarray:
    """One sample for a probe run: a small JPEG for encoded bytes (1-D UINT8), else zeros of the dims."""
    if t.dtype is DType.UINT8 and len(t.dims) == 1 and t.dims[0] == -1:
        with contextlib.suppress(ImportError):
            import io

            from PIL import Image

            buffer = io.BytesIO()
            Image.new("RGB", (40, 30), (200, 120, 40)).save(buffer, format="JPEG")
            return np.frombuffer(buffer.getvalue(), dtype=np.uint8)
    return np.zeros([d if d > 0 else _PROBE_SIZE for d in t.dims], dtype=t.dtype.numpy)


def _dali(step: str) -> Any:
    try:
        import nvidia.dali as dali
    except ImportError as exc:
        raise BuildError(
            f"dali step {step!r}: serializing or running a DALI pipeline needs DALI; "
            "pip install 'conch[dali]' (the nvidia-dali-cuda120 wheel runs CPU pipelines without a GPU)"
        ) from exc
    return dali


def dali_identity() -> list[object] | None:
    """Which DALI would serialize and run pipelines, without importing it: its wheel's version (from package
    metadata) and where it is installed; None when DALI is not installed."""
    try:
        spec = importlib.util.find_spec("nvidia.dali")
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None:
        return None
    from importlib import metadata  # not at import: it costs ~0.02 s of every command

    version = None
    for wheel in _DALI_WHEELS:
        with contextlib.suppress(metadata.PackageNotFoundError):
            version = f"{wheel}=={metadata.version(wheel)}"
            break
    try:
        st = Path(spec.origin).stat()
    except OSError:
        return None
    return [version, spec.origin, st.st_size, st.st_mtime_ns]


def serialize_pipeline(definition: Callable[..., Any], step: str, batch_size: int, num_threads: int | None) -> bytes:
    """Serialize a pipeline function (decorated with ``@pipeline_def`` or not) without a GPU, deterministically."""
    dali = _dali(step)
    # A documented exception to "no private names of other packages" (docs/architecture.md, "Private names
    # kept"): DALI's operator-origin tracing (NVIDIA/DALI#5302) writes each operator's absolute source path and
    # line into the serialized pipeline, so the archive's bytes would depend on the clone's path. Its only
    # switch is nvidia.dali._utils.dali_trace.set_tracing, whose docstring says "this API will remain private";
    # DALI has no public option or environment variable for it. DALI versions without it have nothing to turn
    # off. ``_is_pipeline_def`` is the mark DALI's public ``pipeline_def`` decorator leaves on what it returns.
    dali_trace: Any = None
    with contextlib.suppress(ImportError):
        dali_trace = importlib.import_module("nvidia.dali._utils.dali_trace")
    factory = definition if getattr(definition, "_is_pipeline_def", False) else dali.pipeline_def(definition)
    kwargs: dict[str, Any] = {"batch_size": batch_size, "device_id": None}
    if num_threads:
        kwargs["num_threads"] = num_threads
    previous = dali_trace.is_tracing_enabled() if dali_trace else False
    if dali_trace:
        dali_trace.set_tracing(enabled=False)
    try:
        data: bytes = factory(**kwargs).serialize()
    except Exception as exc:
        raise BuildError(
            f"dali step {step!r}: building the pipeline from {getattr(definition, '__qualname__', definition)} "
            f"failed: {type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
        ) from exc
    finally:
        if dali_trace:
            dali_trace.set_tracing(enabled=previous)
    return data


class DaliStep(Step):
    """A DALI pipeline run by Triton's DALI backend.

    ``DaliStep(name, pipeline, inputs=[...], outputs=[...], max_batch_size=N)``:
    ``pipeline`` is the pipeline's graph-defining function (decorated with ``@pipeline_def`` or plain,
    taking no arguments), or an already serialized pipeline (bytes or a ``.dali`` file). Input names
    must equal the pipeline's ``external_source`` names; outputs are matched to the pipeline's outputs
    by position. ``num_threads`` becomes the pipeline's and the config's ``num_threads``; other DALI
    backend parameters go in ``parameters``. ``autoserialize=True`` ships the pipeline as Python
    (``1/dali.py``, serialized by the server's DALI at load) instead of ``1/model.dali``.
    ``probe=False`` skips the build-time run of the CPU pipeline on a generated input (a small JPEG for
    1-D UINT8 inputs, zeros otherwise) that checks the real output dtypes and dims. ``as_is=True`` lays
    out a serialized pipeline byte for byte instead of declaring the outputs' dtypes and ranks in it.
    A pipeline function is run and serialized at every build; ``pure=True`` says it is pure (the graph
    follows from its code, its folder's modules and the installed libraries, not from files it reads or
    environment variables), so an unchanged rebuild reuses its serialization (``conch.cache.pure_key``).
    """

    kind = "dali"
    platform = Platform.DALI

    def __init__(
        self,
        name: str,
        source: Callable[..., Any] | bytes | str | Path | None = None,
        *legacy: Sequence[Tensor],
        inputs: Sequence[Tensor] | None = None,
        outputs: Sequence[Tensor] | None = None,
        max_batch_size: int = 0,
        num_threads: int | None = None,
        autoserialize: bool = False,
        probe: bool = True,
        as_is: bool = False,
        pure: bool = False,
        cache: bool | None = None,
        pipeline: Callable[..., Any] | bytes | str | Path | None = None,
        **options: Unpack[SettingsArgs],
    ) -> None:
        inputs, outputs = positional_io("DaliStep", legacy, inputs, outputs)
        pipeline = renamed_source("DaliStep", "pipeline", pipeline, source)
        if pipeline is None:
            raise DeclarationError(f"dali step {name!r}: give its pipeline (a pipeline function, or a serialized "
                                   "pipeline: bytes or a .dali file) as the second argument")
        max_batch_size = whole(max_batch_size, f"dali step {name!r}: max_batch_size")
        if max_batch_size < 1:
            raise DeclarationError(
                f"dali step {name!r}: DALI's Triton backend needs max_batch_size >= 1 (a pipeline always "
                f"runs on batches), got {max_batch_size}"
            )
        if num_threads is not None and num_threads < 1:
            raise DeclarationError(f"dali step {name!r}: num_threads must be >= 1, got {num_threads}")
        params = dict(options.get("parameters") or {})
        if num_threads is not None:
            params["num_threads"] = num_threads
        options["parameters"] = params
        settings = StepSettings.of(max_batch_size, what=f"dali step {name!r}", **options)
        super().__init__(name, inputs, outputs, settings)
        for t in (*self.inputs, *self.outputs):
            if t.dtype not in dali_serialized.DALI_DTYPES.values():
                raise DeclarationError(
                    f"dali step {name!r}: tensor {t.name!r} is {t.dtype.wire}, which DALI's Triton backend "
                    "does not exchange; use a numeric dtype (encoded images travel as UINT8)"
                )
        self.num_threads = num_threads
        self.autoserialize = autoserialize
        self.probe = probe
        self.as_is = as_is
        self.pure = pure_flag(f"dali step {name!r}", pure, cache, "DaliStep")
        if as_is and not isinstance(pipeline, bytes | str | Path):
            raise DeclarationError(f"dali step {name!r}: as_is=True lays out a serialized pipeline byte for byte, "
                                   "so pass its file (or bytes), not a pipeline function")
        self._definition: Callable[..., Any] | None = None
        self._file: Artifact | None = None
        if isinstance(pipeline, bytes | str | Path):
            if autoserialize:
                raise DeclarationError(
                    f"dali step {name!r}: autoserialize=True ships the pipeline's Python code, so pass the "
                    "pipeline function, not a serialized pipeline"
                )
            self._file = Artifact(pipeline, what=f"dali step {name!r}", filename=FILENAME)
        elif callable(pipeline):
            self._definition = pipeline
            if autoserialize:
                self._module_name, self._attr, self._source = _definition_source(name, pipeline)
        else:
            raise DeclarationError(
                f"dali step {name!r}: pipeline must be a pipeline function or a serialized pipeline (bytes or "
                f"a path), got {type(pipeline).__name__}"
            )
        self._raw: bytes | None = None

    # -- the serialized pipeline -------------------------------------------------------------------

    def raw_pipeline(self) -> bytes:
        """The pipeline as serialized from the user's function or file, before conch edits it."""
        if self._raw is None:
            if self._file is not None:
                self._raw = self._file.data()
            else:
                self._raw = self._serialized_definition()
        return self._raw

    def pure_code(self) -> Callable[..., Any] | None:
        """The pipeline function a build keys by content when the step is declared pure, else None."""
        return self._definition if self.pure else None

    def _serialized_definition(self) -> bytes:
        """The pipeline function serialized: at every build, or for a step declared ``pure=True``, remembered
        in conch's cache under the function's ``pure_key`` (its code, closures, the Python and the installed
        distributions, DALI's among them), batch size, threads and declared I/O."""
        definition = self._definition
        assert definition is not None

        def serialize() -> bytes:
            return serialize_pipeline(definition, self.name, self.max_batch_size, self.num_threads)

        code = pure_key(definition) if self.pure else None
        if code is None or dali_identity() is None:  # not declared pure, not told by content, or no DALI
            return serialize()
        tensors = [[t.name, t.dtype.wire, list(t.dims)] for t in (*self.inputs, *self.outputs)]
        material = [_REMEMBERED_FORMAT, own_code(), code, self.max_batch_size, self.num_threads, tensors]

        def produce(where: Path) -> None:
            where.write_bytes(serialize())

        key = refreshed_key("dali-pipelines", key_of(material)[:32])
        return cached_file("dali-pipelines", key, FILENAME, produce).read_bytes()

    def serialized(self) -> bytes:
        """``model.dali``: the pipeline with the declared output dtypes and ranks baked in."""
        if self.as_is:  # a model.dali made elsewhere, kept byte for byte (e.g. by `conch import`)
            return self.raw_pipeline()
        declared = [(t.dtype, len(t.dims)) for t in self.outputs]
        return dali_serialized.declare_outputs(self.raw_pipeline(), declared, self.name)

    def check(self, release: Release) -> None:
        super().check(release)
        data = self.raw_pipeline()
        sources = {s.name: s for s in dali_serialized.external_sources(data, self.name)}
        names = ", ".join(repr(n) for n in sources) or "none"
        for t in self.inputs:
            source = sources.get(t.name)
            if source is None:
                raise BuildError(
                    f"dali step {self.name!r}: input {t.name!r} is not an external_source of the pipeline, "
                    f"whose external sources are {names}; name the input after its "
                    "fn.external_source(name=...)"
                )
            found = f"the pipeline's external_source {t.name!r} has"
            self._agrees(t, f"input {t.name!r}", source, f"{found} dtype ", f"({len(t.dims)} per sample) but {found} ")
        unfed = [n for n in sources if n not in {t.name for t in self.inputs}]
        if unfed:
            raise BuildError(
                f"dali step {self.name!r}: the pipeline's external_source {unfed[0]!r} has no declared input; "
                "DALI's backend feeds every external source from a model input, so declare one"
            )
        produced = dali_serialized.outputs(data, self.name)
        if len(produced) != len(self.outputs):
            raise BuildError(
                f"dali step {self.name!r}: the pipeline returns {len(produced)} output(s) but the step declares "
                f"{len(self.outputs)}; DALI's backend matches outputs to the pipeline's by position"
            )
        for index, (t, out) in enumerate(zip(self.outputs, produced, strict=True)):
            what = f"output {t.name!r} (pipeline output {index})"
            self._agrees(t, what, out, "the pipeline declares ", "but the pipeline declares ")

        if self.probe:
            self._probe()

    def _agrees(self, t: Tensor, what: str, found: Any, dtype_found: str, ndim_found: str) -> None:
        """A declared tensor against the dtype and rank the serialized pipeline gives it (None: not given);
        ``dtype_found``/``ndim_found`` say where the pipeline's value comes from, in messages."""
        if found.dtype is not None and found.dtype is not t.dtype:
            raise BuildError(f"dali step {self.name!r}: {what} is declared {t.dtype.wire} but {dtype_found}"
                             f"{found.dtype.wire}")
        if found.ndim is not None and found.ndim != len(t.dims):
            raise BuildError(f"dali step {self.name!r}: {what} is declared with dims {list(t.dims)} {ndim_found}"
                             f"ndim={found.ndim}")

    def check_settings(self) -> dict[str, object]:
        return {"probe": self.probe}

    def _probe(self) -> None:
        """Run the pipeline once on the CPU, so outputs of another dtype or dims fail the build, not the replay."""
        try:
            dali = importlib.import_module("nvidia.dali")
        except ImportError:  # a production build of a serialized pipeline needs no DALI here
            return
        cpu = dali_serialized.on_cpu(self.raw_pipeline(), self.name)
        self._check_runs_on_cpu(cpu)
        try:
            pipe = dali.Pipeline.deserialize(cpu, batch_size=self.max_batch_size, num_threads=1, device_id=None,
                                             exec_pipelined=False, exec_async=False, prefetch_queue_depth=1)
            pipe.build()
            for t in self.inputs:
                pipe.feed_input(t.name, [probe_sample(t)] * min(2, self.max_batch_size))
            results = pipe.run()
        except Exception as exc:
            raise BuildError(
                f"dali step {self.name!r}: running the pipeline once on the CPU on a generated input failed: "
                f"{_cause(exc)}; check the inputs' dtypes and dims (or pass "
                "probe=False if the pipeline cannot run on a generated input)"
            ) from exc
        for index, (t, batch) in enumerate(zip(self.outputs, results, strict=True)):
            self._check_probed(index, t, [np.asarray(sample) for sample in batch])

    def _check_probed(self, index: int, t: Tensor, samples: list[np.ndarray]) -> None:
        where = f"dali step {self.name!r}: output {t.name!r} (pipeline output {index})"
        found = samples[0]
        try:
            dtype = DType.of(str(found.dtype))
        except ConchError:
            dtype = None
        if dtype is not t.dtype:
            raise BuildError(f"{where} is declared {t.dtype.wire} but the pipeline returns {found.dtype} when run "
                             "once on the CPU; declare the dtype it returns, or cast in the pipeline")
        for sample in samples:
            if not dims_compatible(t.dims, sample.shape):
                raise BuildError(f"{where} is declared with dims {list(t.dims)} but the pipeline returns samples "
                                 f"of shape {list(sample.shape)} when run once on the CPU; declare those dims "
                                 "(-1 for a size that varies)")

    # -- layout ------------------------------------------------------------------------------------

    def backend_files(self, model_name: str, release: Release, ensemble: str) -> BackendFiles:
        if not self.autoserialize:
            return BackendFiles({f"1/{FILENAME}": self.serialized()})
        dali_py = render(
            "dali_autoserialize.py.j2", step=self.name, module=self._module_name, attr=self._attr,
            batch_size=self.max_batch_size, num_threads=self.num_threads,
            output_dtypes=[dali_serialized.dtype_id(t.dtype) for t in self.outputs],
            output_ndims=[len(t.dims) for t in self.outputs],
        )
        return BackendFiles({"1/dali.py": dali_py.encode(), f"1/{self._module_name}.py": self._source})

    def standin_note(self, model_name: str) -> str:
        moved = list(dict.fromkeys(dali_serialized.gpu_operators(self.raw_pipeline(), self.name)))
        how = f"GPU operators {', '.join(moved)} swapped for their CPU versions" if moved else "a CPU pipeline"
        return f"{model_name}: dali runs locally as a Python-backend stand-in (DALI on the CPU; {how})"

    def _check_runs_on_cpu(self, cpu: bytes) -> None:
        """Build the CPU pipeline here, so an operator without a CPU version fails the build, not the load;
        a pass is remembered for the same pipeline bytes, DALI and batch size (a failure is not)."""
        dali = dali_identity()
        if dali is None:
            self._build_on_cpu(cpu)  # says DALI is missing
            return
        material = [_REMEMBERED_FORMAT, dali, hashlib.sha256(cpu).hexdigest(), self.max_batch_size]
        remembered("dali-cpu-checks", material, lambda: self._build_on_cpu(cpu))

    def _build_on_cpu(self, cpu: bytes) -> bool:
        """True when DALI builds the CPU pipeline; else the build fails naming DALI's reason."""
        dali = _dali(self.name)
        try:
            dali.Pipeline.deserialize(cpu, batch_size=self.max_batch_size, num_threads=1, device_id=None)
        except Exception as exc:
            raise BuildError(
                f"dali step {self.name!r}: the pipeline cannot run on the CPU for the local stand-in: "
                f"{_cause(exc)}; use operators that have a CPU version, or "
                "replay it on a GPU host"
            ) from exc
        return True

    def standin(self) -> PythonStep:
        """The pipeline on DALI's CPU operators, as a Python-backend model with the same I/O."""
        cpu = dali_serialized.on_cpu(self.serialized(), self.name)
        self._check_runs_on_cpu(cpu)
        spec = {
            "batch_size": self.max_batch_size,
            "num_threads": self.num_threads or 1,
            "inputs": [t.name for t in self.inputs],
            "outputs": [t.name for t in self.outputs],
        }
        files = {FILENAME: cpu, "standin.json": json.dumps(spec, sort_keys=True).encode()}
        return PythonStep.standin_for(self, DaliRunner, files)


def _definition_source(step: str, definition: Callable[..., Any]) -> tuple[str, str, Path]:
    """Module name, attribute and source file of a pipeline function shipped for autoserialization."""
    target = getattr(definition, "__wrapped__", definition)
    qualname = getattr(target, "__qualname__", "")
    if not qualname or "<" in qualname or "." in qualname:
        raise DeclarationError(
            f"dali step {step!r}: with autoserialize=True the pipeline function must be defined at the top "
            "level of a module, so the generated dali.py can import it"
        )
    source = inspect.getsourcefile(target)
    if source is None or not Path(source).is_file():
        raise DeclarationError(
            f"dali step {step!r}: cannot find the source file of {qualname} (defined in an interactive session "
            f"or a notebook cell?); define the pipeline function in a .py module and import it from there")
    path = Path(source).absolute()  # a module found through a relative sys.path entry has a relative file
    if path.stem in ("dali", "model") or not path.stem.isidentifier():
        raise DeclarationError(
            f"dali step {step!r}: the pipeline lives in {path.name}, a name the generated files use or Python "
            "cannot import; rename the module"
        )
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        modules = [a.name for a in node.names] if isinstance(node, ast.Import) else (
            [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        )
        if any(m == "conch" or m.startswith("conch.") for m in modules):
            raise DeclarationError(
                f"dali step {step!r}: {path.name} imports conch, but with autoserialize=True it is imported by "
                "DALI inside Triton, where conch is not installed; move the pipeline to a module of its own"
            )
    return path.stem, qualname, path
