"""Model-level config settings (instance groups, batching, warmup, versions) that every step may set."""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from typing_extensions import Unpack

from conch.ensembles.config_fields import TYPED_OR_CARRIED, ConfigFields, ConfigFieldsArg
from conch.ensembles.dtypes import DType
from conch.ensembles.tensors import whole
from conch.errors import DeclarationError


def pbtxt_text(value: object, what: str) -> str:
    """A string setting that config.pbtxt can carry and Triton reads back whole: no NUL bytes."""
    text = str(value)
    if "\x00" in text:
        raise DeclarationError(f"{what} {text!r} holds a NUL byte, which Triton cuts the value at; remove it")
    return text


LAID_OUT_VERSION = 1  # the one version folder conch lays out per model


class InstanceKind(str, enum.Enum):  # enum.StrEnum from Python 3.11
    """Where Triton runs a model's instances (ModelInstanceGroup.Kind)."""

    __str__ = str.__str__  # the value, as StrEnum's str() gives it

    AUTO = "KIND_AUTO"
    CPU = "KIND_CPU"
    GPU = "KIND_GPU"
    MODEL = "KIND_MODEL"

    @classmethod
    def of(cls, value: object) -> InstanceKind:
        """A kind from the enum or its name, with or without ``KIND_`` and in any case."""
        if isinstance(value, InstanceKind):
            return value
        name = value.upper() if isinstance(value, str) else ""
        with contextlib.suppress(ValueError):
            return cls(name if name.startswith("KIND_") else "KIND_" + name)
        raise DeclarationError(f"instance_group kind {value!r}: use one of {', '.join(k.value for k in cls)}")


@dataclass(frozen=True)
class InstanceGroup:
    """How many copies of a model run, and where."""

    kind: InstanceKind | str = InstanceKind.AUTO
    count: int = 1
    gpus: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "count", whole(self.count, "instance_group count"))
        object.__setattr__(self, "gpus", tuple(whole(g, "instance_group gpus") for g in self.gpus))
        kind = InstanceKind.of(self.kind)
        object.__setattr__(self, "kind", kind)
        if self.count < 1:
            raise DeclarationError(f"instance_group count {self.count}: must be at least 1")
        if self.gpus and kind is not InstanceKind.GPU:
            raise DeclarationError(f"instance_group gpus {list(self.gpus)} only apply to KIND_GPU, not {kind}")


@dataclass(frozen=True)
class DynamicBatching:
    """Let Triton merge requests into batches, preferring these sizes and waiting at most this long."""

    preferred_batch_size: tuple[int, ...] = ()
    max_queue_delay_microseconds: int = 0
    preserve_ordering: bool = False

    def __post_init__(self) -> None:
        sizes = tuple(whole(s, "dynamic_batching preferred_batch_size") for s in self.preferred_batch_size)
        object.__setattr__(self, "preferred_batch_size", sizes)
        delay = whole(self.max_queue_delay_microseconds, "dynamic_batching max_queue_delay_microseconds")
        object.__setattr__(self, "max_queue_delay_microseconds", delay)
        if any(s < 1 for s in self.preferred_batch_size):
            raise DeclarationError(f"dynamic_batching preferred sizes {self.preferred_batch_size} must be >= 1")
        if self.max_queue_delay_microseconds < 0:
            raise DeclarationError("dynamic_batching max_queue_delay_microseconds must be >= 0")


@dataclass(frozen=True)
class WarmupInput:
    """One input of a warmup request read from a file in the model's ``warmup/`` folder (raw row-major
    bytes; BYTES elements as a 4-byte little-endian length, then the bytes)."""

    name: str
    dtype: DType
    dims: tuple[int, ...]
    data_file: str


@dataclass(frozen=True)
class Warmup:
    """A warmup request Triton sends at load: every input filled with zeros or random data, or, when
    ``inputs`` are given (conch derives them from the ensemble's warmup payload), read from files."""

    name: str
    batch_size: int = 1
    count: int = 1
    random_data: bool = False
    inputs: tuple[WarmupInput, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", pbtxt_text(self.name, "model_warmup name"))
        object.__setattr__(self, "batch_size", whole(self.batch_size, f"model_warmup {self.name!r} batch_size"))
        object.__setattr__(self, "count", whole(self.count, f"model_warmup {self.name!r} count"))
        if self.batch_size < 1 or self.count < 1:
            raise DeclarationError(f"model_warmup {self.name!r}: batch_size and count must be >= 1")


@dataclass(frozen=True)
class VersionPolicy:
    """Which versions Triton serves: the latest N, all, or specific ones."""

    latest: int | None = None
    all: bool = False
    specific: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.latest is not None:
            object.__setattr__(self, "latest", whole(self.latest, "version_policy latest"))
        object.__setattr__(self, "specific", tuple(whole(v, "version_policy specific") for v in self.specific))
        chosen = sum([self.latest is not None, bool(self.all), bool(self.specific)])
        if chosen != 1:
            raise DeclarationError("version_policy: give exactly one of latest=N, all=True, specific=(...)")
        if self.latest is not None and self.latest < 1:
            raise DeclarationError("version_policy latest must be >= 1")
        if any(v != LAID_OUT_VERSION for v in self.specific):
            raise DeclarationError(
                f"version_policy specific={list(self.specific)}: conch lays out each model as version "
                f"{LAID_OUT_VERSION} only, so Triton would find no such version; use specific=({LAID_OUT_VERSION},), "
                "latest=1 or all=True"
            )


class SettingsArgs(TypedDict, total=False):
    """The config fields every step takes as keyword arguments, whatever its backend."""

    instance_group: InstanceGroup | Sequence[InstanceGroup] | None
    dynamic_batching: DynamicBatching | bool | None
    parameters: Mapping[str, object] | None
    warmup: Warmup | Sequence[Warmup] | None
    version_policy: VersionPolicy | None
    config_fields: ConfigFieldsArg | None
    warmup_files: Mapping[str, str | Path] | None


@dataclass(frozen=True)
class StepSettings:
    """The config fields every step may set, whatever its backend."""

    max_batch_size: int = 0
    instance_groups: tuple[InstanceGroup, ...] = ()
    dynamic_batching: DynamicBatching | None = None
    parameters: Mapping[str, str] = field(default_factory=dict)
    warmups: tuple[Warmup, ...] = ()
    version_policy: VersionPolicy | None = None
    #: Any other ModelConfig field (response_cache, optimization, sequence_batching, ...), carried whole.
    config_fields: ConfigFields = field(default_factory=ConfigFields)
    #: Files of the model's ``warmup/`` folder, by name: the ``input_data_file``s of its model_warmup.
    warmup_files: Mapping[str, Path] = field(default_factory=dict)

    @staticmethod
    def of(max_batch_size: int = 0, what: str = "step", **options: Unpack[SettingsArgs]) -> StepSettings:
        """Normalise the keyword arguments users pass to a step."""
        unknown = sorted(set(options) - set(SettingsArgs.__annotations__))
        if unknown:
            known = ", ".join(["max_batch_size", *SettingsArgs.__annotations__])
            raise DeclarationError(f"{what}: unknown setting(s) {', '.join(unknown)}; settings are {known}")
        instance_group = options.get("instance_group")
        dynamic_batching = options.get("dynamic_batching")
        parameters = options.get("parameters")
        warmup = options.get("warmup")
        version_policy = options.get("version_policy")
        max_batch_size = whole(max_batch_size, f"{what}: max_batch_size")
        if max_batch_size < 0:
            raise DeclarationError(f"{what}: max_batch_size {max_batch_size} must be >= 0 (0: no batching)")
        if version_policy is not None and not isinstance(version_policy, VersionPolicy):
            raise DeclarationError(f"{what}: version_policy must be a conch.VersionPolicy, got {version_policy!r}")
        groups = (instance_group,) if isinstance(instance_group, InstanceGroup) else tuple(instance_group or ())
        for g in groups:
            if not isinstance(g, InstanceGroup):
                raise DeclarationError(f"{what}: instance_group takes conch.InstanceGroup values, got {g!r}")
        if dynamic_batching is True:
            dynamic_batching = DynamicBatching()
        elif dynamic_batching is False:
            dynamic_batching = None
        elif dynamic_batching is not None and not isinstance(dynamic_batching, DynamicBatching):
            raise DeclarationError(f"{what}: dynamic_batching takes True or conch.DynamicBatching, got "
                                   f"{dynamic_batching!r}")
        if dynamic_batching is not None and max_batch_size == 0:
            raise DeclarationError(
                f"{what}: dynamic_batching needs max_batch_size > 0 (Triton only batches batching models)"
            )
        warmups = (warmup,) if isinstance(warmup, Warmup) else tuple(warmup or ())
        for w in warmups:
            if not isinstance(w, Warmup):
                raise DeclarationError(f"{what}: warmup takes conch.Warmup values, got {w!r}")
            if max_batch_size and w.batch_size > max_batch_size:
                raise DeclarationError(
                    f"{what}: warmup {w.name!r} batch_size {w.batch_size} exceeds max_batch_size {max_batch_size}"
                )
            if not max_batch_size and w.batch_size != 1:
                raise DeclarationError(f"{what}: warmup {w.name!r} batch_size must be 1 without batching")
        if parameters is not None and not isinstance(parameters, Mapping):
            raise DeclarationError(f"{what}: parameters must be a mapping of names to values, got {parameters!r}")
        params = {pbtxt_text(k, f"{what}: parameter"): pbtxt_text(v, f"{what}: parameter {k!r} value")
                  for k, v in (parameters or {}).items()}
        fields = ConfigFields.of(options.get("config_fields"), what)
        typed = {"instance_group": groups, "dynamic_batching": dynamic_batching, "model_warmup": warmups,
                 "version_policy": version_policy}
        for name in fields.names:
            if name in TYPED_OR_CARRIED and typed[name]:
                raise DeclarationError(
                    f"{what}: {name} is given twice, as {TYPED_OR_CARRIED[name]}= and in config_fields; give it "
                    f"once (config_fields carries what {TYPED_OR_CARRIED[name]}= cannot say)"
                )
        if dynamic_batching is not None and "sequence_batching" in fields.names:
            raise DeclarationError(
                f"{what}: dynamic_batching and sequence_batching are both given, but Triton takes one scheduler "
                "per model (ModelConfig's scheduling_choice); keep one"
            )
        files: dict[str, Path] = {}
        for name, path in (options.get("warmup_files") or {}).items():
            if not name or Path(name).is_absolute() or ".." in Path(name).parts:
                raise DeclarationError(f"{what}: warmup file name {name!r} must be a relative path in warmup/")
            files[Path(name).as_posix()] = Path(path)
        return StepSettings(max_batch_size, groups, dynamic_batching, params, warmups, version_policy, fields, files)
