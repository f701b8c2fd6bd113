"""Read a config.pbtxt (or a parsed ModelConfig) into conch's typed spec: the other half of render_config, and
how every part of conch reads a config (`conch check`, the local MME's staging, stamping, inspect, import, the
in-process run's ``initialize``).

The reader is total over what Triton accepts: nothing is refused. Its typed part (ReadConfig) holds what conch
models; every other field, and any part of a tensor or step conch does not model, is carried as Triton's message
(``ReadConfig.carried``), never dropped. The ModelSpec conch renders for the config (``ReadConfig.spec``: fields
that do not fit a typed setting carried whole in ``config_fields``, so rendering it gives back the same
ModelConfig) is computed when asked; it raises what conch cannot declare (a backend without a conch step),
and ``unexpressed`` lists what its declaration cannot say (a tensor ``format``, a step's ``model_namespace``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from dataclasses import field as dataclass_field
from functools import cached_property
from pathlib import Path
from typing import Any, NamedTuple

from google.protobuf import text_format

from conch.compiler.pbtxt import check_config, model_config_proto, parse_config, render_config
from conch.ensembles.backends_table import BY_NAME
from conch.ensembles.config import (
    DynamicBatching,
    InstanceGroup,
    StepSettings,
    VersionPolicy,
    Warmup,
)
from conch.ensembles.config_fields import ConfigFields
from conch.ensembles.dtypes import DType
from conch.ensembles.layout import EnsembleStepSpec, ModelSpec, Platform
from conch.ensembles.tensors import Tensor
from conch.errors import BuildError, ConchError

# Triton's ModelConfig proto without tritonclient.grpc's __init__ (gRPC and asyncio): `import conch` loads this
# module (the executor reads configs through it), and every command imports conch
model_config_pb2 = model_config_proto()

_TENSOR_FIELDS = {"name", "data_type", "dims", "reshape", "optional", "label_filename"}
_STEP_FIELDS = {"model_name", "model_version", "input_map", "output_map"}


class WrittenTensor(NamedTuple):
    """A tensor as a config writes it (``data_type``: Triton's name, e.g. TYPE_FP32)."""

    name: str
    data_type: str
    dims: tuple[int, ...]
    optional: bool


@dataclass(frozen=True)
class ReadConfig:
    """A config read into conch's typed spec. Typed: its name, what serves it (``served``: the platform or backend
    as written), max_batch_size, tensors, ensemble steps, parameters and a version policy conch can declare; every
    other field (and any part of a tensor or step conch does not model) is ``carried``, as Triton's message, read
    through it and never parsed again. Nothing is refused here: ``spec`` (the ModelSpec conch renders, for a
    caller that asks for conch's own declaration) raises what conch cannot declare, ``unexpressed`` lists it."""

    name: str
    served: str
    max_batch_size: int
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    ensemble_steps: tuple[EnsembleStepSpec, ...]
    parameters: Mapping[str, str]
    version_policy: VersionPolicy | None
    carried: Any  # a ModelConfig holding only what the typed fields above do not model
    refusals: tuple[str, ...] = ()  # why conch cannot declare it (``spec`` raises the first)
    _config: Any = dataclass_field(default=None, repr=False, compare=False)
    _folder: Path | None = dataclass_field(default=None, repr=False, compare=False)
    _where: str = dataclass_field(default="config.pbtxt", repr=False, compare=False)

    @property
    def is_ensemble(self) -> bool:
        return self.served == Platform.ENSEMBLE.value

    def io(self, kind: str) -> list[WrittenTensor]:
        """The ``input`` or ``output`` tensors as written, (name, Triton data type, dims, optional): the typed
        ones in order, then any carried whole (a data type conch has no DType for, e.g. TYPE_BF16)."""
        typed = self.inputs if kind == "input" else self.outputs
        out = [WrittenTensor(t.name, t.dtype.triton, t.dims, t.optional) for t in typed]
        names = {t.name for t in typed}
        out += [WrittenTensor(t.name, model_config_pb2.DataType.Name(t.data_type), tuple(t.dims),
                              getattr(t, "optional", False))
                for t in getattr(self.carried, kind) if t.name not in names]
        return out

    def label_filename(self, output: str) -> str:
        """The label file an output names, as written ("" for none)."""
        return next((str(t.label_filename) for t in self.carried.output if t.name == output), "")

    def triton_json(self) -> dict[str, Any]:
        """The whole config as the JSON Triton hands a Python model's ``initialize`` (``args["model_config"]``)."""
        from google.protobuf import json_format

        data: dict[str, Any] = json_format.MessageToDict(self._config, preserving_proto_field_name=True)
        return data

    def message(self) -> Any:
        """A copy of the whole config as Triton's message, for a writer that rewrites it (`conch stamp`)."""
        config = model_config_pb2.ModelConfig()
        config.CopyFrom(self._config)
        return config

    @cached_property
    def _declared(self) -> tuple[ModelSpec, tuple[str, ...]]:
        if self.refusals:
            raise BuildError(self.refusals[0])
        return _declaration(self._config, self._folder, self._where)

    @property
    def spec(self) -> ModelSpec:
        """The ModelSpec conch renders for this config (rendering it gives back the same ModelConfig); raises
        BuildError when conch has no step for it or cannot declare a tensor of it."""
        return self._declared[0]

    @property
    def unexpressed(self) -> tuple[str, ...]:
        """What of the config conch's declaration cannot say (``field: why``)."""
        return self._declared[1]


def read_config(source: str | bytes | Any, folder: Path | None = None, where: str = "config.pbtxt", *,
                strict: bool = False) -> ReadConfig:
    """The typed spec of a config (text, or its UTF-8 bytes, is parsed by parse_config, once); ``folder`` (the
    model folder) finds label files; ``where`` names the file in messages. ``strict``: raise BuildError, as
    ``spec`` does, when conch cannot declare it (`conch import`)."""
    config = parse_config(source, where) if isinstance(source, str | bytes) else source
    refusals: list[str] = []
    served = config.platform or config.backend
    try:
        _served_by(config, where, [])
    except BuildError as exc:
        refusals.append(str(exc))
    inputs = tuple(_read_tensor(t, "input", folder, where, refusals) for t in config.input if _typed_dtype(t))
    outputs = tuple(_read_tensor(t, "output", folder, where, refusals) for t in config.output if _typed_dtype(t))
    for t in (*config.input, *config.output):
        if not _typed_dtype(t):  # carried whole
            refusals.append(f"{where}: tensor {t.name!r}: data_type "
                            f"{model_config_pb2.DataType.Name(t.data_type)} has no conch dtype")
    steps = tuple(EnsembleStepSpec(s.model_name, tuple(s.input_map.items()), tuple(s.output_map.items()),
                                   s.model_version) for s in config.ensemble_scheduling.step)
    policy = _typed_settings(config).get("version_policy")
    read = ReadConfig(config.name, served, config.max_batch_size, inputs, outputs, steps,
                      {k: v.string_value for k, v in config.parameters.items()}, policy,
                      _carried(config, typed_policy=policy is not None), tuple(refusals), config, folder, where)
    if strict:
        read.spec  # noqa: B018 -- raises what conch cannot declare
    return read


def _read_tensor(t: Any, what: str, folder: Path | None, where: str, refusals: list[str]) -> Tensor:
    """The tensor as written: conch's checked Tensor, or (when conch would not declare it, e.g. labels whose
    count differs, a name conch refuses) the same values unchecked, the refusal noted."""
    try:
        return _tensor(t, what, folder, where, [])
    except BuildError as exc:
        refusals.append(str(exc))
    return Tensor.as_written(t.name, DType.of(model_config_pb2.DataType.Name(t.data_type)), tuple(t.dims),
                             optional=getattr(t, "optional", False),
                             reshape=tuple(t.reshape.shape) if t.HasField("reshape") else None)


def _carried(config: Any, typed_policy: bool) -> Any:
    """What the typed fields do not model, as a ModelConfig: whole top-level fields, and the unmodelled parts of
    each tensor (with its name) and ensemble step (with its model name)."""
    carried = model_config_pb2.ModelConfig()
    typed = {*_ALWAYS_TYPED, *(("version_policy",) if typed_policy else ())}
    for f, _ in config.ListFields():
        if f.name not in typed:
            _copy(config, carried, f.name)
    for tensors, kept in ((config.input, carried.input), (config.output, carried.output)):
        for t in tensors:
            rest = [f.name for f, _ in t.ListFields() if f.name not in _MODELLED_TENSOR or not _typed_dtype(t)]
            if rest:
                entry = kept.add(name=t.name)
                for name in rest:
                    _copy(t, entry, name)
    for s in config.ensemble_scheduling.step:
        rest = [f.name for f, _ in s.ListFields() if f.name not in _STEP_FIELDS]
        if rest:
            entry = carried.ensemble_scheduling.step.add(model_name=s.model_name)
            for name in rest:
                _copy(s, entry, name)
    return carried


def _typed_dtype(t: Any) -> bool:
    """Whether conch has a DType for the tensor's data type (not for TYPE_BF16 or TYPE_INVALID)."""
    return t.data_type in _TYPED_DTYPES


_TYPED_DTYPES = frozenset(model_config_pb2.DataType.Value(d.triton) for d in DType)


_MODELLED_TENSOR = {"name", "data_type", "dims", "reshape", "optional"}


def _declaration(config: Any, folder: Path | None, where: str) -> tuple[ModelSpec, tuple[str, ...]]:
    """The ModelSpec conch renders for a config, and what of it conch cannot declare (``field: why``)."""
    problems: list[str] = []
    served_by = _served_by(config, where, problems)
    inputs = tuple(_tensor(t, "input", folder, where, problems) for t in config.input)
    outputs = tuple(_tensor(t, "output", folder, where, problems) for t in config.output)
    steps = tuple(_ensemble_step(s, where, problems) for s in config.ensemble_scheduling.step)
    typed = _typed_settings(config)
    warmups = _typed_warmups(config, inputs)
    if warmups:
        typed["warmups"] = warmups
    carried = model_config_pb2.ModelConfig()
    typed_fields = {_TYPED_FIELD[k] for k in typed}
    for field, _ in config.ListFields():
        if field.name not in (*_ALWAYS_TYPED, *typed_fields):
            _copy(config, carried, field.name)
    params = {k: v.string_value for k, v in config.parameters.items()}
    settings = StepSettings(config.max_batch_size, parameters=params, **typed)
    spec = ModelSpec(config.name, inputs, outputs, served_by, settings, steps)
    spec, rendered = _carry_what_differs(spec, config, carried)
    for name in _ALWAYS_TYPED:
        if config_field(rendered, name) != config_field(config, name) and not any(name in p for p in problems):
            ours, theirs = (text_format.MessageToString(config_field(c, name), as_one_line=True)
                            for c in (rendered, config))
            problems.append(f"{name}: conch writes {ours!r} for {theirs!r}")
    return spec, tuple(problems)


def _served_by(config: Any, where: str, problems: list[str]) -> Platform:
    if config.platform:
        try:
            served = Platform(config.platform)
        except ValueError:
            raise BuildError(f"{where}: platform {config.platform!r} has no conch step (conch has "
                             f"{', '.join(p.value for p in Platform if not p.is_backend)})") from None
        if config.backend:
            problems.append(f"backend: {config.backend!r} beside platform {config.platform!r}; conch writes the "
                            "platform alone")
        return served
    known = BY_NAME.get(config.backend)
    served_by = known.served_by if known else None
    if served_by is not None:  # a backend conch writes as its platform (python and dali have none)
        if not served_by.is_backend:
            problems.append(f"backend: {config.backend!r} is written as platform {served_by.value!r}")
        return served_by
    raise BuildError(f"{where}: backend {config.backend!r} has no conch step (conch has python, dali, and the "
                     f"platforms {', '.join(p.value for p in Platform if not p.is_backend)})")


def _tensor(t: Any, what: str, folder: Path | None, where: str, problems: list[str]) -> Tensor:
    for field, _ in t.ListFields():
        if field.name not in _TENSOR_FIELDS:
            problems.append(f"{what} {t.name!r}: field {field.name!r} has no conch setting")
    labels: Path | None = None
    if what == "output" and t.label_filename:
        path = (folder / t.label_filename) if folder is not None else None
        if path is None or not path.is_file() or path.parent != folder:
            problems.append(f"{what} {t.name!r}: label_filename {t.label_filename!r} is not a file beside the config")
        else:
            labels = path
    try:
        return Tensor(t.name, DType.of(model_config_pb2.DataType.Name(t.data_type)), list(t.dims),
                      optional=getattr(t, "optional", False),
                      reshape=list(t.reshape.shape) if t.HasField("reshape") else None, labels=labels)
    except ConchError as exc:
        raise BuildError(f"{where}: {what} {t.name!r}: {exc}") from exc


def _ensemble_step(s: Any, where: str, problems: list[str]) -> EnsembleStepSpec:
    for field, _ in s.ListFields():
        if field.name not in _STEP_FIELDS:
            problems.append(f"ensemble_scheduling step {s.model_name!r}: field {field.name!r} has no conch setting")
    return EnsembleStepSpec(s.model_name, tuple(s.input_map.items()), tuple(s.output_map.items()), s.model_version)


def _typed_settings(config: Any) -> dict[str, Any]:
    """The settings conch models that this config's values fit (others are carried whole)."""
    typed: dict[str, Any] = {}
    fields = {f.name for f, _ in config.ListFields()}
    try:
        if "instance_group" in fields:
            typed["instance_groups"] = tuple(
                InstanceGroup(model_config_pb2.ModelInstanceGroup.Kind.Name(g.kind), g.count, tuple(g.gpus))
                for g in config.instance_group)
        if "dynamic_batching" in fields:
            d = config.dynamic_batching
            typed["dynamic_batching"] = DynamicBatching(tuple(d.preferred_batch_size), d.max_queue_delay_microseconds,
                                                        d.preserve_ordering)
    except ConchError:
        typed.pop("instance_groups", None)
        typed.pop("dynamic_batching", None)
    if "version_policy" in fields:
        policy = config.version_policy
        try:
            kind = policy.WhichOneof("policy_choice")
            typed["version_policy"] = (VersionPolicy(latest=policy.latest.num_versions) if kind == "latest" else
                                       VersionPolicy(all=True) if kind == "all" else
                                       VersionPolicy(specific=tuple(policy.specific.versions)))
        except ConchError:
            pass
    return typed


_ALWAYS_TYPED = ("name", "platform", "backend", "max_batch_size", "input", "output", "ensemble_scheduling",
                 "parameters")
_TYPED_FIELD = {"instance_groups": "instance_group", "dynamic_batching": "dynamic_batching",
                "version_policy": "version_policy", "warmups": "model_warmup"}


def _typed_warmups(config: Any, inputs: tuple[Tensor, ...]) -> tuple[Warmup, ...]:
    """Warmups conch writes itself: every input, in order, with its own dtype and dims, all zeros or all
    random (BYTES inputs zeros); anything else (data files, other dims) is carried whole."""
    out = []
    for w in config.model_warmup:
        if list(w.inputs) != [t.name for t in inputs]:
            return ()
        kinds = set()
        for t in inputs:
            data = w.inputs[t.name]
            if data.data_type != model_config_pb2.DataType.Value(t.dtype.triton) or tuple(data.dims) != t.dims:
                return ()
            kinds.add(data.WhichOneof("input_data_type") if t.dtype is not DType.BYTES else None)
        kinds.discard(None)
        if len(kinds) > 1 or kinds - {"zero_data", "random_data"}:
            return ()
        try:
            out.append(Warmup(w.name, w.batch_size, w.count, random_data=kinds == {"random_data"}))
        except ConchError:
            return ()
    return tuple(out)


def _carry_what_differs(spec: ModelSpec, config: Any, carried: Any) -> tuple[ModelSpec, Any]:
    """Carry whole any modelled field whose typed form renders differently (e.g. a group's ``name``); the spec,
    and the ModelConfig conch renders for it (rendered and parsed again only when a field moved)."""
    settings = replace(spec.settings, config_fields=ConfigFields(text_format.MessageToString(carried)))
    spec = replace(spec, settings=settings)
    rendered = check_config(render_config(spec), spec.name)
    moved = False
    for setting, field in _TYPED_FIELD.items():
        if getattr(spec.settings, setting) and config_field(rendered, field) != config_field(config, field):
            cleared: dict[str, Any] = {setting: () if setting in ("instance_groups", "warmups") else None}
            settings = replace(settings, **cleared)
            _copy(config, carried, field)
            moved = True
    if not moved:
        return spec, rendered
    spec = replace(spec, settings=replace(settings, config_fields=ConfigFields(text_format.MessageToString(carried))))
    return spec, check_config(render_config(spec), spec.name)


def _copy(source: Any, target: Any, name: str) -> None:
    """Copy one top-level field of a ModelConfig into another."""
    value = getattr(source, name)
    if isinstance(value, str | int):
        setattr(target, name, value)
    elif hasattr(value, "items"):  # a map
        getattr(target, name).MergeFrom(value)
    elif not hasattr(value, "extend"):
        getattr(target, name).CopyFrom(value)
    else:
        getattr(target, name).extend(value)


def config_field(config: Any, name: str) -> Any:
    """One field of a config alone in a ModelConfig, for comparison (message equality ignores map order)."""
    part = model_config_pb2.ModelConfig()
    _copy(config, part, name)
    return part
