"""TensorFlow steps (``tensorflow_graphdef``, ``1/model.graphdef``): a frozen GraphDef; locally a
TensorFlow stand-in. Triton's TensorFlow backend left the containers with 25.03, so builds for later
releases are refused."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from typing_extensions import Unpack

from conch.backends.artifact import Artifact
from conch.backends.python import PythonStep
from conch.backends.standins.tensorflow_runner import GraphDefRunner
from conch.ensembles.backends_table import default_file
from conch.ensembles.config import SettingsArgs, StepSettings
from conch.ensembles.dtypes import DType
from conch.ensembles.layout import Platform
from conch.ensembles.step import BackendFiles, ModelIO, Step, positional_io, renamed_source
from conch.ensembles.target import Release
from conch.ensembles.tensors import Tensor
from conch.errors import BuildError, ConchError, DeclarationError
from conch.startup_lines import startup_lines_dropped

FILENAME = default_file(Platform.TENSORFLOW_GRAPHDEF)  # its default model file (ensembles/backends_table.py)
_INPUT_OPS = ("Placeholder", "PlaceholderV2")
_NOT_OUTPUTS = ("Const", "NoOp", *_INPUT_OPS)

# (name, dtype, dims or None when the graph does not know the rank)
GraphTensor = tuple[str, DType, tuple[int, ...] | None]


def _tensorflow(step: str) -> Any:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's C++ log lines after its start-up
    try:
        with startup_lines_dropped():
            import tensorflow
    except ImportError as exc:
        raise BuildError(
            f"tensorflow step {step!r}: reading a GraphDef needs TensorFlow; pip install 'conch[tensorflow]'"
        ) from exc
    return tensorflow


def _graphdef_bytes(value: Any) -> bytes | None:
    """A GraphDef (or Graph) serialized deterministically: plain SerializeToString orders attr maps
    differently from one process to the next."""
    tf = sys.modules.get("tensorflow")
    if tf is None:
        return None
    if isinstance(value, tf.Graph):
        value = value.as_graph_def()
    if isinstance(value, tf.compat.v1.GraphDef):
        data: bytes = value.SerializeToString(deterministic=True)
        return data
    return None


def read_graphdef_io(data: bytes, batching: bool, step: str) -> tuple[list[GraphTensor], list[GraphTensor]]:
    """Inputs (placeholders) and outputs (nodes nothing consumes) of a frozen graph, batch axis dropped."""
    tf = _tensorflow(step)
    try:
        graph_def = tf.compat.v1.GraphDef.FromString(data)
        graph = tf.Graph()
        with graph.as_default():
            tf.compat.v1.import_graph_def(graph_def, name="")
    except Exception as exc:
        raise BuildError(
            f"tensorflow step {step!r}: {FILENAME} is not a GraphDef TensorFlow can import: {exc}"
        ) from exc
    consumed = {name.lstrip("^").split(":")[0] for node in graph_def.node for name in node.input}

    def convert(node: Any) -> GraphTensor:
        tensor = graph.get_operation_by_name(node.name).outputs[0]
        dtype_name = "bytes" if tensor.dtype == tf.string else tensor.dtype.name
        try:
            dtype = DType.BYTES if dtype_name == "bytes" else DType.of(dtype_name)
        except ConchError:
            raise BuildError(
                f"tensorflow step {step!r}: tensor {node.name!r} is {dtype_name}, which Triton has no type for"
            ) from None
        if tensor.shape.rank is None:
            return node.name, dtype, None
        dims = [-1 if d is None else int(d) for d in tensor.shape.as_list()]
        if batching:
            if not dims or dims[0] != -1:
                raise BuildError(
                    f"tensorflow step {step!r}: tensor {node.name!r} has shape {dims}, but max_batch_size > 0 "
                    "needs an unknown first dimension (None) for the batch; rebuild the graph with "
                    "shape [None, ...] or set max_batch_size=0"
                )
            dims = dims[1:]
        return node.name, dtype, tuple(dims)

    inputs = [convert(n) for n in graph_def.node if n.op in _INPUT_OPS]
    outputs = [
        convert(n) for n in graph_def.node
        if n.name not in consumed and n.op not in _NOT_OUTPUTS and graph.get_operation_by_name(n.name).outputs
    ]
    return inputs, outputs


class TensorFlowStep(Step):
    """A frozen TensorFlow graph run by Triton's TensorFlow backend (``tensorflow_graphdef``).

    ``TensorFlowStep(name, graph)``:
    ``graph`` is a serialized GraphDef (bytes), a ``.graphdef``/``.pb`` file, a ``tf.compat.v1.GraphDef``
    or ``tf.Graph`` (serialized deterministically), or a function returning one of these (called when a
    build needs the file). Inputs are the graph's placeholders and outputs the nodes nothing consumes;
    tensor names are node names and may contain ``/``. Pass ``inputs``/``outputs`` to declare them
    instead (needed when ``graph`` is a function, and to give an output ``labels``); the build checks
    them against the graph.
    """

    kind = "tensorflow"
    platform = Platform.TENSORFLOW_GRAPHDEF
    standin_runs = "TensorFlow on the CPU"
    io_source = "the graph"

    def __init__(
        self,
        name: str,
        source: Any = None,
        *legacy: Sequence[Tensor],
        inputs: Sequence[Tensor] | None = None,
        outputs: Sequence[Tensor] | None = None,
        max_batch_size: int = 0,
        graph: Any = None,
        **options: Unpack[SettingsArgs],
    ) -> None:
        inputs, outputs = positional_io("TensorFlowStep", legacy, inputs, outputs)
        graph = renamed_source("TensorFlowStep", "graph", graph, source)
        if graph is None:
            raise DeclarationError(f"tensorflow step {name!r}: give its graph (a GraphDef, its bytes or file, a "
                                   "tf.Graph, or a function returning one) as the second argument")
        settings = StepSettings.of(max_batch_size, what=f"tensorflow step {name!r}", **options)
        self.artifact = Artifact(
            graph, what=f"tensorflow step {name!r}", filename=FILENAME, serialize=_graphdef_bytes
        )
        super().__init__(name, inputs, outputs, settings)

    def io_unreadable(self) -> str | None:
        return "graph is a function" if self.artifact.deferred else None

    def model_io(self, declared: Sequence[Tensor]) -> ModelIO:
        """The graph's I/O; a tensor whose rank the graph does not know takes its declared dims."""
        found_in, found_out = read_graphdef_io(self.artifact.data(), self.max_batch_size > 0, self.name)
        by_name = {t.name: t for t in declared}

        def tensors(found: Sequence[GraphTensor], what: str) -> tuple[Tensor, ...]:
            out = []
            for name, dtype, dims in found:
                if dims is None and name not in by_name:
                    raise BuildError(
                        f"tensorflow step {self.name!r}: the graph does not know the rank of {what} {name!r}; "
                        f"declare {what}s= with their dims"
                    )
                if dims is None:
                    t = by_name[name]
                    dims = t.reshape if t.reshape is not None else t.dims
                out.append(Tensor(name, dtype, dims))
            return tuple(out)

        return ModelIO(FILENAME, tensors(found_in, "input"), tensors(found_out, "output"))

    def check(self, release: Release) -> None:
        if not release.has_tensorflow:
            raise BuildError(
                f"tensorflow step {self.name!r}: Triton {release} has no TensorFlow backend (it left the "
                "containers with 25.03); build for an earlier release (--release 25.02 or older), or convert "
                "the graph to ONNX (e.g. with tf2onnx) and use an OnnxStep"
            )
        super().check(release)

    def backend_files(self, model_name: str, release: Release, ensemble: str) -> BackendFiles:
        return BackendFiles({f"1/{FILENAME}": self.artifact.resolve()})

    def standin(self) -> PythonStep:
        """The same graph in a TensorFlow session on the CPU, as a Python-backend model with the same I/O."""
        spec = {"inputs": [t.name for t in self.inputs], "outputs": [t.name for t in self.outputs]}
        files = {FILENAME: self.artifact.resolve(), "standin.json": json.dumps(spec, sort_keys=True).encode()}
        return PythonStep.standin_for(self, GraphDefRunner, files)
