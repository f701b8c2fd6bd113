"""The Ensemble: a DAG of steps declared by passing tensor handles, checked across steps; the handles,
the step calls and the binding of handles to a step's inputs live here."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from conch.diagram import Edge, Graph, Node, dims_text, mime_bundle
from conch.ensembles.config import StepSettings
from conch.ensembles.config_fields import ConfigFields, ConfigFieldsArg
from conch.ensembles.dtypes import DType
from conch.ensembles.environment import PythonEnv
from conch.ensembles.layout import EnsembleStepSpec, ModelSpec, Platform
from conch.ensembles.names import check_model_name, check_tensor_name
from conch.ensembles.run_result import RunResult
from conch.ensembles.samples import Sample, Tolerance, ToleranceSpec
from conch.ensembles.step import Step, pure_flag
from conch.ensembles.tensors import Tensor, as_array, dims_compatible, whole
from conch.ensembles.warmup import WarmupRequest
from conch.errors import DeclarationError, RunError

# conch.run, registered by conch.executor when it is imported (conch's public names import it), for the
# deprecated Ensemble.run: the declaration imports no layer above its own (tests/test_layers.py)
_IN_PROCESS: list[Callable[..., RunResult]] = []


def register_run(run: Callable[..., RunResult]) -> None:
    """Make ``run`` (``conch.run``) what the deprecated ``Ensemble.run`` calls."""
    _IN_PROCESS[:] = [run]

_NOT_ON_ENSEMBLES = ("instance_group", "dynamic_batching", "model_warmup")


class TensorHandle:
    """A value flowing through an ensemble: an ensemble input or a step's output."""

    def __init__(
        self,
        ensemble: Ensemble,
        name: str,
        dtype: DType,
        dims: tuple[int, ...],
        producer: StepCall | None = None,
        output_name: str | None = None,
    ) -> None:
        self.ensemble = ensemble
        self.name = name
        self.dtype = dtype
        self.dims = dims
        self.producer = producer
        self.output_name = output_name

    def describe(self) -> str:
        if self.producer is None:
            return f"ensemble input {self.name!r}"
        return f"output {self.output_name!r} of step {self.producer.step.name!r}"

    def named(self, name: str) -> TensorHandle:
        """Name this step output inside the ensemble (by default ``<step>.<output>``), e.g. to reproduce an
        existing ensemble's config; returns the handle, so ``dali(encoded).named("preprocessed_image")``."""
        self.ensemble.name_tensor(self, name)
        return self

    def __repr__(self) -> str:
        dims = ", ".join(str(d) for d in self.dims)
        return f"<TensorHandle {self.describe()} {self.dtype.wire}[{dims}] in {self.ensemble.name!r}>"

    def __iter__(self) -> Any:
        raise DeclarationError(
            f"{self.describe()} is a single tensor handle; a step with one output returns one handle, "
            "so do not unpack it"
        )


class Outputs(tuple[TensorHandle, ...]):
    """The handles a multi-output step returns: unpack them, or index them by output name."""

    def __getitem__(self, key):  # type: ignore[no-untyped-def]
        if isinstance(key, str):
            for handle in self:
                if handle.output_name == key:
                    return handle
            names = ", ".join(repr(h.output_name) for h in self)
            raise KeyError(f"no output {key!r}; this step has {names}")
        return super().__getitem__(key)


@dataclass
class StepCall:
    """A step placed in an ensemble, with the handles wired to its inputs and produced by its outputs."""

    step: Step
    inputs: dict[str, TensorHandle]
    outputs: dict[str, TensorHandle]


def bind(step: Step, args: Sequence[object], kwargs: Mapping[str, object]) -> dict[str, TensorHandle]:
    """The handles of a step call by input name: positional ones in declared order, then keywords."""
    if len(args) > len(step.inputs):
        raise DeclarationError(
            f"step {step.name!r} takes {len(step.inputs)} inputs "
            f"({', '.join(t.name for t in step.inputs)}), got {len(args)} positional handles"
        )
    bound: dict[str, object] = {spec.name: value for spec, value in zip(step.inputs, args, strict=False)}
    names = {t.name for t in step.inputs}
    for key, value in kwargs.items():
        if key not in names:
            raise DeclarationError(
                f"step {step.name!r} has no input {key!r}; its inputs are "
                f"{', '.join(repr(t.name) for t in step.inputs)}"
            )
        if key in bound:
            raise DeclarationError(f"step {step.name!r}: input {key!r} given both by position and by name")
        bound[key] = value
    for spec in step.inputs:
        if spec.name not in bound and not spec.optional:
            raise DeclarationError(
                f"step {step.name!r}: required input {spec.name!r} is not connected; pass a tensor "
                "handle for it (or declare it optional=True)"
            )
    if not bound:
        raise DeclarationError(f"step {step.name!r}: call it with at least one tensor handle")
    handles: dict[str, TensorHandle] = {}
    for key, value in bound.items():
        if not isinstance(value, TensorHandle):
            raise DeclarationError(
                f"step {step.name!r}: inputs must be tensor handles (from ensemble.input() or another "
                f"step), got {type(value).__name__}"
            )
        handles[key] = value
    return handles


class Ensemble:
    """A Triton ensemble declared in Python.

    Args:
        name: the ensemble's model name (SageMaker MME renames it to the TargetModel when it loads).
        max_batch_size: 0 for no batching; otherwise at most every batching step's max_batch_size (a step with
            0 takes the whole batch as its first dimension).
        step_prefix: prefix of the steps' model names; defaults to the ensemble name so that many
            ensembles' steps load side by side on one server without model namespacing ("" names each
            step's model after the step alone).
        description: free text recorded in the manifest.
        env: the Python environment of every Python step that declares none of its own.
        config_fields: other ModelConfig fields of the ensemble's own config (e.g. ``response_cache``), as
            proto text, ``{field: value}`` or a ModelConfig message; checked against Triton's proto.
        keep_ensemble: a DAG of one step is built as that model alone (a single-model archive: the ensemble
            scheduler's hop saved) when its callers cannot tell the difference; True keeps the ensemble around
            it anyway.
    """

    def __init__(
        self,
        name: str,
        *,
        max_batch_size: int = 0,
        step_prefix: str | None = None,
        description: str = "",
        env: PythonEnv | None = None,
        config_fields: ConfigFieldsArg | None = None,
        keep_ensemble: bool = False,
        **refused: Any,
    ) -> None:
        for key in refused:
            if key in _NOT_ON_ENSEMBLES:
                raise DeclarationError(
                    f"ensemble {name!r}: {key} cannot be set on an ensemble (Triton rejects it there); "
                    "set it on the steps instead"
                )
            raise DeclarationError(f"Ensemble() got an unexpected keyword argument {key!r}")
        self.name = check_model_name(name, "ensemble")
        max_batch_size = whole(max_batch_size, f"ensemble {name!r}: max_batch_size")
        if max_batch_size < 0:
            raise DeclarationError(f"ensemble {name!r}: max_batch_size must be >= 0, got {max_batch_size}")
        self.max_batch_size = int(max_batch_size)
        prefix = step_prefix if step_prefix is not None else name
        self.step_prefix = prefix and check_model_name(prefix, "step prefix")
        self.description = description
        if env is not None and not isinstance(env, PythonEnv):
            raise DeclarationError(f"ensemble {name!r}: env must be a conch.PythonEnv, got {env!r}")
        self.env = env
        self.config_fields = ConfigFields.of(config_fields, f"ensemble {name!r}", ensemble=True)
        if not isinstance(keep_ensemble, bool):
            raise DeclarationError(f"ensemble {name!r}: keep_ensemble must be True or False, got {keep_ensemble!r}")
        self.keep_ensemble = keep_ensemble
        self.inputs: dict[str, TensorHandle] = {}
        self._input_specs: dict[str, Tensor] = {}
        self.outputs: dict[str, TensorHandle] = {}
        self.calls: list[StepCall] = []
        self._named: dict[int, TensorHandle] = {}  # step outputs given a name of their own
        self.discarded: set[int] = set()
        self.samples: list[Sample] = []
        self.warmup_request: WarmupRequest | None = None

    def __repr__(self) -> str:
        return f"<Ensemble {self.name!r}: {len(self.calls)} steps>"

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        """Jupyter's display: the DAG as SVG (Graphviz), or as Mermaid and text where Graphviz is missing."""
        bundle = dict(mime_bundle(self.graph()))
        bundle.setdefault("text/plain", repr(self))
        return bundle

    def _repr_svg_(self) -> str | None:
        return self._repr_mimebundle_().get("image/svg+xml")

    def graph(self) -> Graph:
        """The nodes and edges of the DAG, in declaration order (`conch graph` and the Jupyter display draw it)."""
        nodes: list[Node] = []
        edges: list[Edge] = []
        for name, handle in self.inputs.items():
            nodes.append(Node(f"in:{name}", "tensor", (name, f"{handle.dtype.wire} {dims_text(handle.dims)}")))
        for call in self.calls:
            nodes.append(Node(call.step.name, "step", _step_lines(call.step)))
            for key, handle in call.inputs.items():
                source = f"in:{handle.name}" if handle.producer is None else handle.producer.step.name
                edges.append(Edge(source, call.step.name, _edge_label(handle, key)))
        for name, handle in self.outputs.items():
            assert handle.producer is not None  # declaration refuses an ensemble input as an output
            nodes.append(Node(f"out:{name}", "tensor", (name, f"{handle.dtype.wire} {dims_text(handle.dims)}")))
            edges.append(Edge(handle.producer.step.name, f"out:{name}", _edge_label(handle, name)))
        batching = f"max_batch_size {self.max_batch_size}" if self.max_batch_size else "no batching"
        return Graph(self.name, f"ensemble {self.name} ({batching})", tuple(nodes), tuple(edges))

    # -- declaring -------------------------------------------------------------------------------

    def input(self, name: str, dtype: DType | str, dims: Sequence[int], *, optional: bool = False) -> TensorHandle:
        """Declare an ensemble input and return its handle (dims exclude the batch dimension)."""
        check_tensor_name(name, f"ensemble {self.name!r} input")
        self._refuse_taken(name, f"ensemble {self.name!r}")
        spec = Tensor(name, dtype, dims, optional=optional)
        handle = TensorHandle(self, name, spec.dtype, spec.dims)
        self.inputs[name] = handle
        self._input_specs[name] = spec
        return handle

    def output(
        self,
        name: str,
        handle: TensorHandle,
        *,
        dtype: DType | str | None = None,
        dims: Sequence[int] | None = None,
    ) -> None:
        """Make a step's output an ensemble output; ``dtype``/``dims``, if given, are checked."""
        what = f"ensemble {self.name!r} output {name!r}"
        check_tensor_name(name, what)
        if not isinstance(handle, TensorHandle):
            raise DeclarationError(f"{what}: pass the tensor handle a step returned, got {type(handle).__name__}")
        if handle.ensemble is not self:
            raise DeclarationError(f"{what}: {handle.describe()} belongs to ensemble {handle.ensemble.name!r}")
        if handle.producer is None:
            raise DeclarationError(
                f"{what}: {handle.describe()} is an ensemble input; Triton ensembles can only output tensors "
                "that a step produces"
            )
        self._refuse_taken(name, what, handle)
        for other, h in self.outputs.items():
            if h is handle:
                raise DeclarationError(
                    f"{what}: {handle.describe()} is already ensemble output {other!r}; each tensor is written "
                    "once"
                )
        if dtype is not None and DType.of(dtype) is not handle.dtype:
            raise DeclarationError(
                f"{what}: declared {DType.of(dtype).wire} but {handle.describe()} is {handle.dtype.wire}"
            )
        if dims is not None and not dims_compatible(tuple(dims), handle.dims):
            raise DeclarationError(
                f"{what}: declared dims {list(dims)} but {handle.describe()} has dims {list(handle.dims)}"
            )
        self.outputs[name] = handle

    def name_tensor(self, handle: TensorHandle, name: str) -> None:
        """Give a step output its ensemble-scope name (see ``TensorHandle.named``)."""
        what = f"ensemble {self.name!r}: naming {handle.describe()}"
        check_tensor_name(name, what)
        if handle.ensemble is not self:
            raise DeclarationError(f"{what}: it belongs to ensemble {handle.ensemble.name!r}")
        if handle.producer is None:
            raise DeclarationError(f"{what}: an ensemble input is named by ensemble.input() already")
        for output, h in self.outputs.items():
            if h is handle:
                raise DeclarationError(f"{what}: it is ensemble output {output!r}, which names it already")
        if name != handle.name:
            self._refuse_taken(name, what, by_default=True)
        handle.name = name
        self._named[id(handle)] = handle

    def _refuse_taken(
        self, name: str, what: str, exempt: TensorHandle | None = None, *, by_default: bool = False
    ) -> None:
        """Refuse a tensor name that an input, an output or a named step output (but ``exempt``) has; with
        ``by_default`` also the ``<step>.<output>`` names (a clash with those is otherwise found by
        ``validate``)."""
        if name in self.inputs or name in self.outputs:
            raise DeclarationError(f"{what}: tensor {name!r} is already declared")
        for handle in self._all_handles() if by_default else self._named.values():
            if handle.name == name and handle is not exempt:
                raise DeclarationError(
                    f"{what}: tensor name {name!r} is taken by {handle.describe()}; choose another name"
                )

    def discard(self, *handles: TensorHandle) -> None:
        """Mark step outputs as deliberately unused (otherwise an unused output is an error)."""
        for handle in handles:
            if handle.producer is None:
                raise DeclarationError(f"ensemble {self.name!r}: only step outputs can be discarded")
            self.discarded.add(id(handle))

    def sample(
        self,
        name: str,
        inputs: Mapping[str, Any],
        expected: Mapping[str, Any] | Callable[[], Mapping[str, Any]],
        tolerance: ToleranceSpec | None = None,
        *,
        pure: bool = False,
        cache: bool | None = None,
    ) -> None:
        """Add a sample payload (arrays include the batch dimension) and its expected outputs, compared with
        ``tolerance``: one check (Tolerance, TopK, Exact) for every output, or a mapping output -> check.
        A function for ``expected`` runs at every build; ``pure=True`` says it is pure (its answer follows
        from its code, its folder's modules and the installed libraries), so an unchanged rebuild reuses it
        (``cache=``: its old name, deprecated)."""
        what = f"ensemble {self.name!r} sample {name!r}"
        if any(s.name == name for s in self.samples):
            raise DeclarationError(f"{what}: a sample of that name exists already")
        pure = pure_flag(what, pure, cache, "Ensemble.sample")
        sample = Sample(name, self.payload(inputs, what), expected, Tolerance() if tolerance is None else tolerance,
                        pure)
        declared = {n: (h.dtype, h.dims) for n, h in self.outputs.items()}
        if not isinstance(tolerance, Mapping) or set(tolerance) <= set(declared):  # outputs may come later
            sample.check_outputs(declared, f"ensemble {self.name!r}")
        self.samples.append(sample)

    def payload(self, inputs: Mapping[str, Any], what: str) -> dict[str, np.ndarray]:
        """A request's inputs as arrays of the declared dtypes, checked against the declared dims."""
        arrays: dict[str, np.ndarray] = {}
        for key, value in inputs.items():
            if key not in self.inputs:
                raise DeclarationError(f"{what}: no ensemble input {key!r}; inputs are {sorted(self.inputs)}")
            spec = self._input_specs[key]
            arr = as_array(value, spec.dtype)
            full = ((-1,) if self.max_batch_size else ()) + spec.dims
            if not dims_compatible(full, arr.shape):
                raise DeclarationError(
                    f"{what}: input {key!r} has shape {list(arr.shape)}, expected {list(full)} "
                    "(-1: any size; the first dimension is the batch when the ensemble batches)"
                )
            if self.max_batch_size and arr.shape[0] > self.max_batch_size:
                raise DeclarationError(
                    f"{what}: batch of {arr.shape[0]} exceeds the ensemble's max_batch_size {self.max_batch_size}"
                )
            arrays[key] = arr
        missing = [k for k, s in self._input_specs.items() if k not in arrays and not s.optional]
        if missing:
            raise DeclarationError(f"{what}: no value for required input(s) {missing}")
        return arrays

    def warmup(self, payload: Mapping[str, Any] | str, *, count: int = 1) -> None:
        """Warm every step at load with this payload (or the inputs of the sample of that name): the build
        runs it through the DAG in this process and gives each step a ``model_warmup`` holding exactly
        the tensors that step receives."""
        self.warmup_request = WarmupRequest.declare(self, payload, count)

    def run(self, inputs: Mapping[str, Any], *, intermediates: bool = False, strict: bool = True) -> RunResult:
        """Deprecated (kept one release): ``conch.run(ensemble, inputs)``, which this calls."""
        warnings.warn("Ensemble.run is deprecated: call conch.run(ensemble, inputs, ...) (conch.Executor to run "
                      "many requests, or to see each step as it runs); Ensemble.run goes in the next release",
                      DeprecationWarning, stacklevel=2)
        if not _IN_PROCESS:
            raise RunError(f"ensemble {self.name!r}: Ensemble.run needs conch's in-process run, which was not "
                           "loaded (the declaration was imported from its own module); call conch.run(ensemble, "
                           "inputs)")
        return _IN_PROCESS[0](self, inputs, intermediates=intermediates, strict=strict)

    # -- wiring (Step.__call__ calls this) ----------------------------------------------------------

    def call(self, step: Step, *args: object, **kwargs: object) -> TensorHandle | Outputs:
        """Wire ``step`` into this ensemble with input handles given by position (declared order) or by
        input name; return its output handle, or ``Outputs`` when it has several."""
        bound = bind(step, args, kwargs)
        for h in bound.values():
            if h.ensemble is not self:
                raise DeclarationError(
                    f"step {step.name!r}: {h.describe()} belongs to ensemble {h.ensemble.name!r}, not "
                    f"{self.name!r}; a step's inputs come from one ensemble"
                )
        for call in self.calls:
            if call.step.name == step.name:
                raise DeclarationError(
                    f"ensemble {self.name!r}: a step named {step.name!r} is already in this ensemble; "
                    "each step runs once per ensemble, so declare a second step with another name"
                )
        for spec in step.inputs:
            handle = bound.get(spec.name)
            if handle is None:
                continue
            where = f"ensemble {self.name!r}, step {step.name!r}, input {spec.name!r}"
            if handle.dtype is not spec.dtype:
                raise DeclarationError(
                    f"{where}: expects {spec.dtype.wire} but {handle.describe()} is {handle.dtype.wire}; "
                    "convert it in a step before, or fix the declared dtype"
                )
            if self.max_batch_size and not step.max_batch_size and len(spec.dims) != len(handle.dims) + 1:
                raise DeclarationError(
                    f"{where}: the step does not batch (max_batch_size 0) inside an ensemble that does, so it gets "
                    f"the whole batch: declare its dims with the batch first, e.g. {[-1, *handle.dims]} (Triton "
                    f"loads dims {list(spec.dims)}, but every request with a batch then fails)"
                )
            want = self._seen_dims(step, spec)
            if not dims_compatible(want, handle.dims):
                raise DeclarationError(
                    f"{where}: expects dims {list(want)} but {handle.describe()} has dims {list(handle.dims)} "
                    "(-1 matches any size)"
                )
        self._refuse_decoupled(step)
        call = StepCall(step, dict(bound), {})
        for spec in step.outputs:
            dims = self._seen_dims(step, spec)
            handle = TensorHandle(self, f"{step.name}.{spec.name}", spec.dtype, dims, call, spec.name)
            call.outputs[spec.name] = handle
        self.calls.append(call)
        outputs = list(call.outputs.values())
        return outputs[0] if len(outputs) == 1 else Outputs(outputs)

    def _refuse_decoupled(self, step: Step) -> None:
        """Combinations Triton or SageMaker refuse for a decoupled step (model_transaction_policy)."""
        policy = step.settings.config_fields.get("model_transaction_policy")
        if policy is None or not policy.decoupled:
            return
        where = f"ensemble {self.name!r}, step {step.name!r}"
        cache = self.config_fields.get("response_cache")
        if cache is not None and cache.enable:
            raise DeclarationError(
                f"{where}: the step is decoupled (model_transaction_policy), and Triton refuses response_cache "
                "on an ensemble holding a decoupled model; drop one of the two"
            )
        raise DeclarationError(
            f"{where}: the step is decoupled (model_transaction_policy), but every conch archive is a SageMaker "
            "multi-model endpoint, whose front end refuses decoupled models; make the step non-decoupled"
        )

    def _seen_dims(self, step: Step, spec: Tensor) -> tuple[int, ...]:
        """A step tensor's dims as the ensemble sees them: without batch if both batch, else full (a non-batching
        step in a batching ensemble declares the batch as its first dimension, as Triton compares them)."""
        if self.max_batch_size == 0 and step.max_batch_size > 0:
            return (-1, *spec.dims)
        if self.max_batch_size > 0 and step.max_batch_size == 0:
            return spec.dims[1:]
        return spec.dims

    # -- checking ----------------------------------------------------------------------------------

    def validate(self) -> None:
        """Every check across steps that a build needs; raises DeclarationError naming the offence."""
        where = f"ensemble {self.name!r}"
        if not self.calls:
            raise DeclarationError(f"{where}: has no steps; call a step with the ensemble's input handles")
        if not self.outputs:
            raise DeclarationError(f"{where}: declares no outputs; bind a step's output with ensemble.output()")
        names: dict[str, str] = {}
        for handle in self._all_handles():
            tensor = self.tensor_name(handle)
            if tensor in names and names[tensor] != handle.describe():
                raise DeclarationError(
                    f"{where}: tensor name {tensor!r} is used by both {names[tensor]} and {handle.describe()}; "
                    "rename one of them"
                )
            names[tensor] = handle.describe()
        consumed = {id(h) for call in self.calls for h in call.inputs.values()}
        for name, handle in self.inputs.items():
            if id(handle) not in consumed:
                raise DeclarationError(
                    f"{where}: input {name!r} is not used by any step; pass it to a step or remove it"
                )
        optional = {id(h): name for name, h in self.inputs.items() if self._input_specs[name].optional}
        for call in self.calls:
            required = {t.name for t in call.step.inputs if not t.optional}
            for key, handle in call.inputs.items():
                if id(handle) in optional and key in required:
                    raise DeclarationError(
                        f"{where}: input {optional[id(handle)]!r} is optional, but step {call.step.name!r} "
                        f"requires it as {key!r}: a request without it fails in Triton (the step cannot run "
                        f"without it); declare the step's input {key!r} optional=True, or the ensemble's input "
                        "required"
                    )
        bound = {id(h) for h in self.outputs.values()}
        for call in self.calls:
            for out, handle in call.outputs.items():
                if id(handle) not in consumed | bound | self.discarded:
                    raise DeclarationError(
                        f"{where}: output {out!r} of step {call.step.name!r} is never used; pass it to a "
                        "step, make it an ensemble output with ensemble.output(), or ensemble.discard() it"
                    )
            # Triton (core ensemble_utils.cc ValidateEnsembleConfig) holds batching steps to this; a step that does
            # not batch takes the whole batch as its first dimension
            if self.max_batch_size and 0 < call.step.max_batch_size < self.max_batch_size:
                raise DeclarationError(
                    f"{where}: max_batch_size {self.max_batch_size} exceeds step {call.step.name!r}'s "
                    f"max_batch_size {call.step.max_batch_size}; lower the ensemble's or raise the step's"
                )
            check_model_name(self.model_name(call.step), f"{where}, step {call.step.name!r}")
        model_names = [self.model_name(c.step) for c in self.calls]
        if self.name in model_names:
            raise DeclarationError(f"{where}: a step's model name equals the ensemble's; change step_prefix")
        for sample in self.samples:
            unknown = set(sample.expected_arrays()) - set(self.outputs) if not callable(sample.expected) else set()
            if unknown:
                raise DeclarationError(f"{where}: sample {sample.name!r} expects unknown outputs {sorted(unknown)}")
            sample.check_outputs({n: (h.dtype, h.dims) for n, h in self.outputs.items()}, where)

    def _all_handles(self) -> list[TensorHandle]:
        handles = list(self.inputs.values())
        for call in self.calls:
            handles.extend(call.outputs.values())
        return handles

    # -- rendering inputs --------------------------------------------------------------------------

    def env_of(self, step: Step) -> PythonEnv | None:
        """The environment a step runs in: its own, else the ensemble's for Python steps."""
        own: PythonEnv | None = getattr(step, "env", None)
        if own is not None:
            return own
        return self.env if step.platform is Platform.PYTHON else None

    def model_name(self, step: Step) -> str:
        """The model (folder) name of a step in this ensemble's repository."""
        return f"{self.step_prefix}__{step.name}" if self.step_prefix else step.name

    def tensor_name(self, handle: TensorHandle) -> str:
        """The ensemble-scope tensor name of a handle (its output name if it is an ensemble output)."""
        for name, h in self.outputs.items():
            if h is handle:
                return name
        return handle.name

    def input_specs(self) -> tuple[Tensor, ...]:
        return tuple(self._input_specs.values())

    def output_specs(self) -> tuple[Tensor, ...]:
        return tuple(Tensor(name, h.dtype, h.dims) for name, h in self.outputs.items())

    def spec(self, name: str | None = None) -> ModelSpec:
        """The ensemble's own config: I/O and the scheduling steps in wiring order."""
        steps = []
        for call in self.calls:
            input_map = tuple((k, self.tensor_name(h)) for k, h in call.inputs.items())
            output_map = tuple(
                (k, self.tensor_name(h))
                for k, h in call.outputs.items()
                if id(h) not in self.discarded or any(h is o for o in self.outputs.values())
            )
            steps.append(EnsembleStepSpec(self.model_name(call.step), input_map, output_map))
        return ModelSpec(
            name=name or self.name,
            inputs=self.input_specs(),
            outputs=self.output_specs(),
            served_by=Platform.ENSEMBLE,
            settings=StepSettings(max_batch_size=self.max_batch_size, config_fields=self.config_fields),
            ensemble_steps=tuple(steps),
        )


def _step_lines(step: Step) -> tuple[str, ...]:
    """A step's name, backend, instance groups and batching, one line each (a node of the DAG's picture)."""
    settings = step.settings
    groups = ", ".join(f"{g.count} × {g.kind}" + (f" gpus {list(g.gpus)}" if g.gpus else "")
                       for g in settings.instance_groups) or "default"
    if not settings.max_batch_size:
        batching = "no batching"
    else:
        batching = f"max_batch_size {settings.max_batch_size}"
        dynamic = settings.dynamic_batching
        if dynamic is not None:
            batching += ", dynamic"
            if dynamic.preferred_batch_size:
                batching += f" {dims_text(dynamic.preferred_batch_size)}"
            if dynamic.max_queue_delay_microseconds:
                batching += f" delay {dynamic.max_queue_delay_microseconds} us"
    return (step.name, str(step.platform), f"instances: {groups}", batching)


def _edge_label(handle: TensorHandle, into: str) -> str:
    name = handle.output_name if handle.producer is not None and handle.output_name else handle.name
    names = name if name == into else f"{name} → {into}"
    return f"{names}: {handle.dtype.wire} {dims_text(handle.dims)}"
