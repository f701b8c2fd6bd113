"""ONNX Runtime steps (``onnxruntime_onnx``, ``1/model.onnx``); locally an ONNX Runtime stand-in."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from typing_extensions import Unpack

from conch.backends.artifact import RELATIVE_HINT
from conch.backends.python import PythonStep
from conch.backends.standins.onnxruntime_runner import OnnxRuntimeRunner
from conch.ensembles.config import SettingsArgs, StepSettings
from conch.ensembles.dtypes import DType
from conch.ensembles.layout import Platform
from conch.ensembles.step import BackendFiles, ModelIO, Step, positional_io, renamed_source
from conch.ensembles.target import Release
from conch.ensembles.tensors import Tensor
from conch.errors import BuildError, ConchError, DeclarationError

ModelSource = str | Path | Callable[[], str | Path]


def read_onnx_io(path: Path, batching: bool, step: str) -> tuple[tuple[Tensor, ...], tuple[Tensor, ...]]:
    """Inputs and outputs of an ONNX file as Triton tensors (the batch axis dropped when batching)."""
    import onnx

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:
        raise BuildError(f"onnx step {step!r}: cannot read {path}: {exc}") from exc
    initializers = {i.name for i in model.graph.initializer}

    def convert(value: Any) -> Tensor:
        ttype = value.type.tensor_type
        try:  # onnx's own map of element types to numpy's (STRING to object: BYTES)
            dtype = DType.of(onnx.helper.tensor_dtype_to_np_dtype(ttype.elem_type))
        except (KeyError, ConchError):  # undefined, or a type Triton has none for (complex, bfloat16, float8)
            raise BuildError(f"onnx step {step!r}: tensor {value.name!r} has an element type Triton lacks") from None
        dims = [d.dim_value if d.HasField("dim_value") else -1 for d in ttype.shape.dim]
        if batching:
            if not dims:
                raise BuildError(f"onnx step {step!r}: tensor {value.name!r} is a scalar, so it cannot batch")
            if dims[0] != -1:
                raise BuildError(
                    f"onnx step {step!r}: tensor {value.name!r} has a fixed first dimension {dims[0]}, but "
                    "max_batch_size > 0 needs a dynamic batch axis; export with dynamic axes or set "
                    "max_batch_size=0"
                )
            dims = dims[1:]
        return Tensor(value.name, dtype, dims)

    inputs = tuple(convert(v) for v in model.graph.input if v.name not in initializers)
    outputs = tuple(convert(v) for v in model.graph.output)
    for init in model.graph.initializer:
        if init.data_location == onnx.TensorProto.EXTERNAL:
            raise BuildError(
                f"onnx step {step!r}: {path.name} keeps weights in external data files; save it as one file "
                "(onnx.save(model, path, save_as_external_data=False))"
            )
    return inputs, outputs


class OnnxStep(Step):
    """A model run by Triton's ONNX Runtime backend.

    ``OnnxStep(name, model)``:
    ``model`` is a path to a ``.onnx`` file, or a function returning one (called when a build needs the
    file, e.g. to export weights at build time). Inputs and outputs are read from the file; pass
    ``inputs``/``outputs`` to declare them instead (needed when ``model`` is a function), and the build
    checks them against the file.
    """

    kind = "onnx"
    platform = Platform.ONNXRUNTIME_ONNX
    standin_runs = "ONNX Runtime on the CPU"
    io_source = "the file"

    def __init__(
        self,
        name: str,
        source: ModelSource | None = None,
        *legacy: Sequence[Tensor],
        inputs: Sequence[Tensor] | None = None,
        outputs: Sequence[Tensor] | None = None,
        max_batch_size: int = 0,
        model: ModelSource | None = None,
        **options: Unpack[SettingsArgs],
    ) -> None:
        inputs, outputs = positional_io("OnnxStep", legacy, inputs, outputs)
        model = renamed_source("OnnxStep", "model", model, source)
        if model is None:
            raise DeclarationError(f"onnx step {name!r}: give its model (a .onnx file, or a function returning "
                                   "one) as the second argument")
        settings = StepSettings.of(max_batch_size, what=f"onnx step {name!r}", **options)
        self._model = model
        self._path: Path | None = None
        super().__init__(name, inputs, outputs, settings)

    def model_path(self) -> Path:
        """The ONNX file, produced by the model function on first use."""
        if self._path is None:
            source = self._model() if callable(self._model) else self._model
            path = Path(source)
            if not path.is_file():
                raise BuildError(f"onnx step {self.name!r}: model file {path} does not exist"
                                 f"{RELATIVE_HINT if not path.is_absolute() else ''}")
            self._path = path.absolute()
        return self._path

    def io_unreadable(self) -> str | None:
        return "model is a function" if callable(self._model) else None

    def model_io(self, declared: Sequence[Tensor]) -> ModelIO:
        path = self.model_path()
        return ModelIO(path.name, *read_onnx_io(path, self.max_batch_size > 0, self.name))

    def backend_files(self, model_name: str, release: Release, ensemble: str) -> BackendFiles:
        return BackendFiles({"1/model.onnx": self.model_path()})

    def standin(self) -> PythonStep:
        """The same model under ONNX Runtime on the CPU, as a Python-backend model with the same I/O."""
        return PythonStep.standin_for(self, OnnxRuntimeRunner, {"model.onnx": self.model_path()})
