"""PyTorch steps (``pytorch_libtorch``, ``1/model.pt``): a TorchScript module; locally a torch stand-in.

TorchScript keeps forward()'s argument names but no dtypes or shapes, so a step declares its tensors
and the build checks them: names bind the way the libtorch backend binds them (forward() argument
names, or the ``<name>__<index>`` convention), and one run on zeros of the declared inputs checks the
outputs' count, dtypes and dims.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import sys
import warnings
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from typing_extensions import Unpack

from conch.backends.artifact import Artifact
from conch.backends.python import PythonStep
from conch.backends.standins.torchscript_runner import TorchScriptRunner
from conch.backends.torchscript_names import canonical_names
from conch.cache import file_sha256, remembered, stat_identity
from conch.ensembles.backends_table import default_file
from conch.ensembles.config import SettingsArgs, StepSettings
from conch.ensembles.dtypes import DType
from conch.ensembles.layout import Platform
from conch.ensembles.step import BackendFiles, Step, positional_io, renamed_source
from conch.ensembles.target import Release
from conch.ensembles.tensors import Tensor, dims_compatible
from conch.errors import BuildError, ConchError, DeclarationError

FILENAME = default_file(Platform.PYTORCH_LIBTORCH)  # its default model file (ensembles/backends_table.py)
# Size used for -1 dims (and the batch) when probing the module with zeros.
_PROBE_SIZE = 2


@dataclass(frozen=True)
class Binding:
    """How declared tensors meet forward(): inputs in argument order, outputs by result index."""

    inputs: tuple[str, ...]
    outputs: tuple[tuple[str, int], ...]


_BINDING_FORMAT = 1  # bump when what binding() decides changes, so remembered bindings are not reused


def named_index(name: str) -> int | None:
    """The index of a ``<name>__<index>`` tensor name as the libtorch backend reads it (digits after the
    first ``__``), else None."""
    _, sep, tail = name.partition("__")
    return int(tail) if sep and tail.isascii() and tail.isdigit() else None


def bind_inputs(step: str, declared: Sequence[str], arguments: Sequence[str]) -> tuple[str, ...]:
    """Declared input names in forward() order, bound by argument name or by ``__<index>``.

    Triton also falls back to config order when neither applies; conch refuses that instead, because
    a misspelt argument name would silently feed the wrong tensor.
    """
    args = ", ".join(repr(a) for a in arguments) or "none"
    if len(declared) != len(arguments):
        raise BuildError(
            f"pytorch step {step!r}: {FILENAME}'s forward() takes {len(arguments)} tensors ({args}), but the "
            f"step declares {len(declared)} inputs; declare one input per forward() argument"
        )
    if all(name in arguments for name in declared):
        return tuple(sorted(declared, key=list(arguments).index))
    indices = [named_index(name) for name in declared]
    if all(i is not None for i in indices):
        by_index: dict[int, str] = {}
        for name, index in zip(declared, indices, strict=True):
            assert index is not None
            if index >= len(arguments):
                raise BuildError(
                    f"pytorch step {step!r}: input {name!r} names forward() argument {index}, but forward() "
                    f"takes {len(arguments)} ({args}); number inputs from __0"
                )
            if index in by_index:
                raise BuildError(
                    f"pytorch step {step!r}: inputs {by_index[index]!r} and {name!r} both name forward() "
                    f"argument {index}"
                )
            by_index[index] = name
        return tuple(by_index[i] for i in sorted(by_index))
    stray = next(n for n in declared if n not in arguments)
    raise BuildError(
        f"pytorch step {step!r}: input {stray!r} is not an argument of forward() in {FILENAME} (its arguments "
        f"are {args}), and the inputs do not all follow the <name>__<index> convention; name the inputs "
        "after forward()'s arguments, or INPUT__0, INPUT__1, ... in argument order"
    )


def bind_outputs(declared: Sequence[str]) -> tuple[tuple[str, int], ...]:
    """Output names with their index in forward()'s result: ``__<index>``, else declaration order."""
    indices = [named_index(name) for name in declared]
    if all(i is not None for i in indices):
        return tuple((name, int(i)) for name, i in zip(declared, indices, strict=True))  # type: ignore[arg-type]
    return tuple((name, i) for i, name in enumerate(declared))


def torchscript_bytes(module: Any) -> bytes:
    """A ScriptModule as deterministic model.pt bytes.

    Saved through a buffer, so the zip's root folder is always ``archive`` (torch.jit.save to a path
    names it after the file), and without the ``*.debug_pkl`` records: a traced module keeps the
    Python call stack of the trace there (absolute paths and line numbers of the tracing code), which
    would make the file depend on where and from what it was built. TorchScript runs the same without
    them; only its error messages lose the source lines. Type names are made canonical too: torch
    names a type ``___torch_mangle_N`` when the process compiled another of that name before, so
    without it the same model saved after other tracing would be other bytes.
    """
    import torch

    buffer = io.BytesIO()
    with _torchscript_warnings_off():
        torch.jit.save(module, buffer)
    return _without_debug_records(buffer.getvalue())


def _without_debug_records(data: bytes) -> bytes:
    """The archive rewritten by torch's own writer (which aligns records and derives the serialization
    id from the content), minus the debug records, with type names that do not depend on what the
    process compiled before (see torchscript_names)."""
    import torch

    source = zipfile.ZipFile(io.BytesIO(data))
    root = source.namelist()[0].split("/", 1)[0]
    names = set(source.namelist())
    # Older formats keep the version in "version", newer ones in ".data/version".
    version_record = next(f"{root}/{n}" for n in (".data/version", "version") if f"{root}/{n}" in names)
    version = int(source.read(version_record).decode().strip())
    records = {}
    for info in source.infolist():
        name = info.filename.split("/", 1)[1]
        if name.endswith(".debug_pkl") or name in ("version", ".data/version", ".data/serialization_id"):
            continue  # the writer adds version and serialization id itself
        records[name] = source.read(info.filename)
    records = canonical_names(records) or records
    buffer = io.BytesIO()
    # A documented exception (docs/architecture.md, "Private names kept"): torch.jit.save has no option to
    # leave out the .debug_pkl records (pytorch/pytorch#123066, closed unfixed: TorchScript is no longer
    # developed) and torch has no public writer of its zip records, which it aligns in its own way.
    writer = torch._C.PyTorchFileWriter(buffer)
    for name, record in records.items():
        writer.write_record(name, record, len(record))
    writer.set_min_version(version)
    writer.write_end_of_file()
    return buffer.getvalue()


def _script_bytes(value: Any) -> bytes | None:
    """model.pt bytes of an in-memory ScriptModule (see torchscript_bytes); None for other objects."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    if isinstance(value, torch.jit.ScriptModule):
        return torchscript_bytes(value)
    if isinstance(value, torch.nn.Module):
        raise DeclarationError(
            f"a pytorch step needs TorchScript, but got the eager module {type(value).__name__}; convert it "
            "with torch.jit.trace(module, example_inputs) or torch.jit.script(module)"
        )
    return None


@contextlib.contextmanager
def _torchscript_warnings_off() -> Iterator[None]:
    """torch 2.13 deprecates torch.jit.save/load in favour of torch.export, but Triton's libtorch backend
    loads TorchScript, so the warning is noise here."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`torch\.jit\.", category=DeprecationWarning)
        yield


class TorchScriptStep(Step):
    """A TorchScript model run by Triton's PyTorch (libtorch) backend.

    ``TorchScriptStep(name, model, inputs=[...], outputs=[...])``:
    ``model`` is a traced or scripted module, a ``.pt`` file, its bytes, or a function returning one of
    these (called when a build needs the file). Name inputs after forward()'s arguments or
    ``INPUT__0, INPUT__1, ...``; name outputs ``OUTPUT__0, ...`` (or any names, bound in declaration
    order). ``probe=False`` skips the build-time run on zeros, for models that cannot run on zeros.
    """

    kind = "pytorch"
    platform = Platform.PYTORCH_LIBTORCH
    standin_runs = "torch on the CPU"

    def __init__(
        self,
        name: str,
        source: Any = None,
        *legacy: Sequence[Tensor],
        inputs: Sequence[Tensor] | None = None,
        outputs: Sequence[Tensor] | None = None,
        max_batch_size: int = 0,
        probe: bool = True,
        model: Any = None,
        **options: Unpack[SettingsArgs],
    ) -> None:
        inputs, outputs = positional_io("TorchScriptStep", legacy, inputs, outputs)
        model = renamed_source("TorchScriptStep", "model", model, source)
        if model is None:
            raise DeclarationError(f"pytorch step {name!r}: give its TorchScript model (a module, a .pt file or its "
                                   "bytes, or a function returning one) as the second argument")
        settings = StepSettings.of(max_batch_size, what=f"pytorch step {name!r}", **options)
        super().__init__(name, inputs, outputs, settings)
        for t in (*self.inputs, *self.outputs):
            if t.dtype is DType.BYTES:
                raise DeclarationError(
                    f"pytorch step {name!r}: tensor {t.name!r} is BYTES; conch's pytorch steps take numeric "
                    "tensors only (tokenize strings in a Python step before)"
                )
        self.artifact = Artifact(model, what=f"pytorch step {name!r}", filename=FILENAME, serialize=_script_bytes)
        self.probe = probe
        self._binding: Binding | None = None

    def check(self, release: Release) -> None:
        super().check(release)
        self.binding()

    def binding(self) -> Binding:
        """Bind declared names to forward() (and probe the module once); remembered in conch's cache for
        the same file, torch and declaration, so an unchanged rebuild does not import torch."""
        if self._binding is None:
            material = self._binding_material()
            if material is None:
                self._binding = self._bind()
            else:
                known = remembered("bindings", material, lambda: asdict(self._bind()))
                self._binding = Binding(tuple(known["inputs"]), tuple((n, i) for n, i in known["outputs"]))
        return self._binding

    def _binding_material(self) -> list[object] | None:
        """What the binding depends on: the file (content, or its ``stat_identity`` for a file on disk that did
        not change in the last seconds), torch's version, the declared tensors and the probe (``remembered``
        adds conch's code and the installed distributions); None when torch is not installed (the load says
        so)."""
        from importlib import metadata  # not at import: it costs ~0.02 s of every command

        try:
            torch_version = metadata.version("torch")
        except metadata.PackageNotFoundError:
            return None
        source = self.artifact.resolve()
        known = None if isinstance(source, bytes) else stat_identity(source)
        identity: list[object] = list(known) if known is not None else [
            hashlib.sha256(source).hexdigest() if isinstance(source, bytes) else file_sha256(source)]
        tensors = [[t.name, t.dtype.wire, list(t.dims), None if t.reshape is None else list(t.reshape)]
                   for t in (*self.inputs, *self.outputs)]
        return [_BINDING_FORMAT, torch_version, identity, tensors, len(self.inputs), self.max_batch_size,
                self.probe]

    def _bind(self) -> Binding:
        """Load the module, bind the declared names to forward() and probe it once."""
        module = self._load()
        arguments = [a.name for a in module.forward.schema.arguments[1:]]
        kinds = {a.name: str(a.type) for a in module.forward.schema.arguments[1:]}
        odd = [f"{n}: {k}" for n, k in kinds.items() if k != "Tensor"]
        if odd:
            raise BuildError(
                f"pytorch step {self.name!r}: forward() in {FILENAME} takes {', '.join(odd)}; conch binds "
                "tensor arguments only"
            )
        binding = Binding(
            bind_inputs(self.name, [t.name for t in self.inputs], arguments),
            bind_outputs([t.name for t in self.outputs]),
        )
        if self.probe:
            self._probe(module, binding)
        return binding

    def _load(self) -> Any:
        try:
            import torch
        except ImportError as exc:
            raise BuildError(
                f"pytorch step {self.name!r}: reading {FILENAME} needs torch; pip install 'conch[pytorch]'"
            ) from exc
        source = self.artifact.resolve()
        file = io.BytesIO(source) if isinstance(source, bytes) else str(source)
        try:
            with _torchscript_warnings_off():
                return torch.jit.load(file, map_location="cpu")
        except Exception as exc:
            raise BuildError(
                f"pytorch step {self.name!r}: {self.artifact.describe()} is not a TorchScript file torch can "
                f"load: {type(exc).__name__}: {exc}"
            ) from exc

    def _probe(self, module: Any, binding: Binding) -> None:
        """Run forward() once on zeros of the declared inputs; check outputs' count, dtypes and dims."""
        import torch

        batch = [_PROBE_SIZE] if self.max_batch_size > 0 else []
        declared = {t.name: t for t in self.inputs}
        args, shown = [], []
        for name in binding.inputs:
            t = declared[name]
            shape = batch + [d if d > 0 else _PROBE_SIZE for d in (t.reshape if t.reshape is not None else t.dims)]
            args.append(torch.zeros(shape, dtype=getattr(torch, str(t.dtype.numpy))))
            shown.append(f"{name}: {t.dtype.wire} {shape}")
        try:
            with torch.inference_mode():
                result = module(*args)
        except Exception as exc:
            # TorchScript errors end with the Python-level cause after a long interpreter trace.
            lines = str(exc).strip().splitlines()
            cause = lines[-1] if lines else type(exc).__name__
            raise BuildError(
                f"pytorch step {self.name!r}: running {FILENAME} on zeros shaped like the declared inputs "
                f"({'; '.join(shown)}) failed: {cause}; check the inputs' dtypes and "
                "dims (or pass probe=False if the model cannot run on zeros)"
            ) from exc
        results = (result,) if isinstance(result, torch.Tensor) else result
        if not isinstance(results, tuple | list) or not all(isinstance(r, torch.Tensor) for r in results):
            raise BuildError(
                f"pytorch step {self.name!r}: forward() returned {type(result).__name__}; the libtorch backend "
                "needs a tensor or a tuple of tensors"
            )
        declared_out = {t.name: t for t in self.outputs}
        for name, index in binding.outputs:
            t = declared_out[name]
            if index >= len(results):
                raise BuildError(
                    f"pytorch step {self.name!r}: output {name!r} is element {index} of forward()'s result, "
                    f"which has {len(results)} element(s); declare one output per element"
                )
            actual = results[index]
            try:
                dtype = DType.of(str(actual.dtype).removeprefix("torch."))
            except ConchError:
                dtype = None
            if dtype is not t.dtype:
                found = dtype.wire if dtype else str(actual.dtype)
                raise BuildError(
                    f"pytorch step {self.name!r}: output {name!r} is declared {t.dtype.wire} but {FILENAME} "
                    f"returns {found}"
                )
            shape = list(actual.shape)
            if batch:
                if not shape or shape[0] != _PROBE_SIZE:
                    raise BuildError(
                        f"pytorch step {self.name!r}: output {name!r} has shape {shape} for a batch of "
                        f"{_PROBE_SIZE}; with max_batch_size > 0 outputs keep the batch dimension first"
                    )
                shape = shape[1:]
            want = t.reshape if t.reshape is not None else t.dims
            if not dims_compatible(want, shape):
                raise BuildError(
                    f"pytorch step {self.name!r}: output {name!r} is declared with dims {list(want)} but "
                    f"{FILENAME} returns {shape} (probed with {_PROBE_SIZE} for each -1)"
                )

    def backend_files(self, model_name: str, release: Release, ensemble: str) -> BackendFiles:
        return BackendFiles({f"1/{FILENAME}": self.artifact.resolve()})

    def standin(self) -> PythonStep:
        """The same module under torch on the CPU, as a Python-backend model with the same I/O."""
        spec = json.dumps(asdict(self.binding()), sort_keys=True).encode()
        files = {FILENAME: self.artifact.resolve(), "standin.json": spec}
        return PythonStep.standin_for(self, TorchScriptRunner, files)
