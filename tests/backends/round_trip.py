"""A declaration's config built directly with Triton's ModelConfig protobuf (no template involved), to be
compared whole with what conch renders: every field the declaration sets, and nothing else."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tritonclient.grpc import model_config_pb2

from conch import Ensemble, Tensor
from conch.ensembles.config import StepSettings
from conch.ensembles.layout import Platform
from conch.ensembles.step import Step

ModelConfig = model_config_pb2.ModelConfig


def _tensor(message, t: Tensor) -> None:  # type: ignore[no-untyped-def]
    message.name = t.name
    message.data_type = model_config_pb2.DataType.Value(t.dtype.triton)
    message.dims.extend(t.dims)
    if t.reshape is not None:
        message.reshape.SetInParent()
        message.reshape.shape.extend(t.reshape)


def declared_config(
    name: str,
    platform: Platform,
    inputs: Sequence[Tensor],
    outputs: Sequence[Tensor],
    settings: StepSettings,
    steps: Sequence[tuple[str, Mapping[str, str], Mapping[str, str]]] = (),
) -> model_config_pb2.ModelConfig:
    """The ModelConfig a declaration means: name, platform or backend, batch size, I/O, settings, steps."""
    config = ModelConfig(name=name, max_batch_size=settings.max_batch_size)
    if platform.is_backend:
        config.backend = platform.value
    else:
        config.platform = platform.value
    for t in inputs:
        message = config.input.add()
        _tensor(message, t)
        message.optional = t.optional
    for t in outputs:
        message = config.output.add()
        _tensor(message, t)
        message.label_filename = t.label_filename or ""
    for g in settings.instance_groups:
        config.instance_group.add(kind=model_config_pb2.ModelInstanceGroup.Kind.Value(g.kind), count=g.count,
                                  gpus=g.gpus)
    if settings.dynamic_batching is not None:
        batching = settings.dynamic_batching
        config.dynamic_batching.SetInParent()
        config.dynamic_batching.preferred_batch_size.extend(batching.preferred_batch_size)
        config.dynamic_batching.max_queue_delay_microseconds = batching.max_queue_delay_microseconds
        config.dynamic_batching.preserve_ordering = batching.preserve_ordering
    for key, value in settings.parameters.items():
        config.parameters[key].string_value = value
    for w in settings.warmups:
        warmup = config.model_warmup.add(name=w.name, batch_size=w.batch_size, count=w.count)
        for t in inputs:
            data = warmup.inputs[t.name]
            data.data_type = model_config_pb2.DataType.Value(t.dtype.triton)
            data.dims.extend(t.dims)
            if w.random_data and t.dtype.wire != "BYTES":
                data.random_data = True
            else:
                data.zero_data = True
    policy = settings.version_policy
    if policy is not None and policy.latest is not None:
        config.version_policy.latest.num_versions = policy.latest
    elif policy is not None and policy.all:
        config.version_policy.all.SetInParent()
    elif policy is not None:
        config.version_policy.specific.versions.extend(policy.specific)
    for model, input_map, output_map in steps:
        step = config.ensemble_scheduling.step.add(model_name=model, model_version=-1)
        step.input_map.update(input_map)
        step.output_map.update(output_map)
    return config


def step_config(model: str, step: Step) -> model_config_pb2.ModelConfig:
    """What a step's declaration means in production."""
    return declared_config(model, step.platform, step.inputs, step.outputs, step.settings)


def ensemble_config(ens: Ensemble) -> model_config_pb2.ModelConfig:
    """What an ensemble's declaration means: its inputs, its outputs as the handles bound to them, and each
    call's wiring (an ensemble output's name where a step output is one, else the handle's name)."""
    bound = {id(h): name for name, h in ens.outputs.items()}
    outputs = [Tensor(name, h.dtype, h.dims) for name, h in ens.outputs.items()]
    steps = [
        (ens.model_name(call.step),
         {key: h.name for key, h in call.inputs.items()},
         {key: bound.get(id(h), h.name) for key, h in call.outputs.items()})
        for call in ens.calls
    ]
    return declared_config(ens.name, Platform.ENSEMBLE, ens.input_specs(), outputs,
                           StepSettings(max_batch_size=ens.max_batch_size), steps)
