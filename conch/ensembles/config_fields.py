"""ModelConfig fields conch does not model as typed settings (response_cache, optimization,
sequence_batching, rate limiters, ...): given on a step or an ensemble as proto values or proto text,
checked against Triton's ModelConfig proto when declared, carried whole into config.pbtxt."""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from conch.errors import DeclarationError

# Fields conch always writes from its own declaration (the step, its tensors, the ensemble's wiring).
TYPED_ONLY = ("name", "platform", "backend", "max_batch_size", "input", "output", "ensemble_scheduling",
              "parameters")
# Fields conch models as typed settings, which may be carried whole instead when the typed setting is not
# given (e.g. an instance_group with a rate_limiter, a dynamic_batching with priority levels).
TYPED_OR_CARRIED = {"instance_group": "instance_group", "dynamic_batching": "dynamic_batching",
                    "model_warmup": "warmup", "version_policy": "version_policy"}
# Fields Triton refuses on an ensemble: no instances, no scheduler but the ensemble's (one oneof in the
# proto), no warmup, no optimization (instance_group, model_warmup and optimization seen refused when the
# 2.51 server here polls the ensemble's config).
NOT_ON_ENSEMBLES = ("instance_group", "dynamic_batching", "sequence_batching", "model_warmup", "optimization")

ConfigFieldsArg = str | Mapping[str, Any] | Any  # proto text, {field: value}, or a ModelConfig message


def _proto() -> Any:
    from tritonclient.grpc import model_config_pb2  # grpc is heavy: only when fields are given

    return model_config_pb2


def nearest(name: str, choices: list[str]) -> str:
    """' (nearest: a, b)' for a misspelt field, or the valid names when none is near."""
    near = difflib.get_close_matches(name, choices, n=3, cutoff=0.5)
    return f"nearest: {', '.join(near)}" if near else f"fields are {', '.join(sorted(choices))}"


@dataclass(frozen=True)
class ConfigFields:
    """Extra ModelConfig fields, kept as the canonical proto text of a ModelConfig holding only them."""

    text: str = ""

    def __bool__(self) -> bool:
        return bool(self.text)

    def message(self) -> Any:
        """The fields as a ``ModelConfig`` message."""
        from google.protobuf import text_format

        config = _proto().ModelConfig()
        text_format.Parse(self.text, config)
        return config

    @property
    def names(self) -> tuple[str, ...]:
        """The top-level fields given, in proto order."""
        if not self.text:
            return ()
        return tuple(f.name for f, _ in self.message().ListFields())

    def get(self, name: str) -> Any:
        """One field's value, or None when it is not given."""
        if name not in self.names:
            return None
        return getattr(self.message(), name)

    @staticmethod
    def of(value: ConfigFieldsArg | None, what: str, *, ensemble: bool = False) -> ConfigFields:
        """Check ``value`` against Triton's ModelConfig and normalise it; ``what`` names the owner."""
        if isinstance(value, ConfigFields):  # checked again: a step's fields may be given to an ensemble
            value = value.text
        if value is None or value == "":
            return ConfigFields()
        config = _parse(value, what)
        from google.protobuf import text_format

        fields = [f.name for f, _ in config.ListFields()]
        fields += [str(k) for k in value if k not in fields] if isinstance(value, Mapping) else []
        for name in fields:
            if name in TYPED_ONLY:
                setting = {"input": "inputs=", "output": "outputs=", "ensemble_scheduling": "the ensemble's wiring",
                           "parameters": "parameters="}.get(name, f"{name}=")
                raise DeclarationError(
                    f"{what}: config_fields gives {name!r}, which conch writes from the declaration; set it "
                    f"with {setting} instead"
                )
            if ensemble and name in NOT_ON_ENSEMBLES:
                raise DeclarationError(
                    f"{what}: config_fields gives {name!r}, which Triton refuses on an ensemble; set it on the "
                    "steps instead"
                )
        return ConfigFields(text_format.MessageToString(config))


def _parse(value: object, what: str) -> Any:
    from google.protobuf import json_format, message, text_format

    pb = _proto()
    config = pb.ModelConfig()
    if isinstance(value, message.Message):
        if not isinstance(value, pb.ModelConfig):
            raise DeclarationError(
                f"{what}: config_fields takes a ModelConfig message, proto text or {{field: value}}; got a "
                f"{type(value).__name__} message (give it as {{'<field>': message}})"
            )
        config.CopyFrom(value)
        return config
    if isinstance(value, str):
        try:
            text_format.Parse(value, config)
        except text_format.ParseError as exc:
            raise DeclarationError(f"{what}: config_fields text does not parse as Triton's ModelConfig: "
                                   f"{_explained(str(exc))}") from exc
        return config
    if not isinstance(value, Mapping):
        raise DeclarationError(f"{what}: config_fields takes proto text, a ModelConfig message or "
                               f"{{field: value}}, got {type(value).__name__}")
    for name, item in value.items():
        descriptor = pb.ModelConfig.DESCRIPTOR.fields_by_name.get(name)
        if descriptor is None:
            raise DeclarationError(
                f"{what}: config_fields field {name!r} is not a field of Triton's ModelConfig "
                f"({nearest(str(name), list(pb.ModelConfig.DESCRIPTOR.fields_by_name))})"
            )
        part = pb.ModelConfig()
        try:
            if isinstance(item, message.Message) or (
                    isinstance(item, list | tuple) and item and all(isinstance(x, message.Message) for x in item)):
                for one in item if isinstance(item, list | tuple) else (item,):
                    _set_message(part, name, one)
            elif isinstance(item, str) and descriptor.message_type is not None:
                text_format.Parse(f"{name} {{ {item} }}", part)
            else:
                _check_keys(item, descriptor.message_type, f"{name}")
                json_format.ParseDict({name: item}, part)
        except (text_format.ParseError, json_format.ParseError, TypeError, ValueError) as exc:
            raise DeclarationError(f"{what}: config_fields field {name!r}: {_explained(str(exc))}") from exc
        config.MergeFrom(part)
    return config


def _set_message(part: Any, name: str, item: Any) -> None:
    target = getattr(part, name)
    if hasattr(target, "add"):  # a repeated field given one message
        target.add().CopyFrom(item)
    else:
        target.CopyFrom(item)


def _check_keys(item: object, descriptor: Any, path: str) -> None:
    """Name a misspelt key of a dict value with the nearest valid names (json_format only says it is unknown)."""
    if descriptor is None:
        return
    if isinstance(item, list | tuple):
        for x in item:
            _check_keys(x, descriptor, path)
        return
    if not isinstance(item, Mapping):
        return
    if descriptor.GetOptions().map_entry:
        value = descriptor.fields_by_name["value"].message_type
        for key, x in item.items():
            _check_keys(x, value, f"{path}[{key!r}]")
        return
    names = list(descriptor.fields_by_name)
    for key, x in item.items():
        field = descriptor.fields_by_name.get(key) or next(
            (f for f in descriptor.fields if f.json_name == key), None)
        if field is None:
            raise ValueError(f"{path}.{key} is not a field of {descriptor.name} ({nearest(str(key), names)})")
        _check_keys(x, field.message_type, f"{path}.{key}")


_NO_FIELD = re.compile(r'Message type "([\w.]+)" has no field named "(\w+)"')


def _explained(error: str) -> str:
    """A parse error, with the nearest valid field names when it names an unknown one."""
    found = _NO_FIELD.search(error)
    if not found:
        return error
    from google.protobuf import descriptor_pool

    _proto()
    try:
        message = descriptor_pool.Default().FindMessageTypeByName(found.group(1))
    except KeyError:
        return error
    return f"{error} ({nearest(found.group(2), list(message.fields_by_name))})"
