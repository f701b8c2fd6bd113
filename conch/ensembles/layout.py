"""The contract between the backends and the builder: what one model puts in a repository (its config as
a ModelSpec and its files), computed by a step or the ensemble and written by the builder."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from conch.ensembles.config import StepSettings
from conch.ensembles.tensors import Tensor

# A file in a model folder: its bytes, or a path on disk to copy.
FileSource = bytes | Path


class Platform(str, enum.Enum):  # enum.StrEnum from Python 3.11
    """How Triton runs a model: the ``platform`` of its config, or the ``backend`` for backends that have
    no platform name (Triton's own spelling of each)."""

    __str__ = str.__str__  # the value, as StrEnum's str() gives it

    ENSEMBLE = "ensemble"
    ONNXRUNTIME_ONNX = "onnxruntime_onnx"
    TENSORRT_PLAN = "tensorrt_plan"
    TENSORFLOW_GRAPHDEF = "tensorflow_graphdef"
    PYTORCH_LIBTORCH = "pytorch_libtorch"
    PYTHON = "python"
    DALI = "dali"

    @property
    def is_backend(self) -> bool:
        """True when config.pbtxt names it as ``backend:`` rather than ``platform:``."""
        return self in (Platform.PYTHON, Platform.DALI)


@dataclass(frozen=True)
class EnsembleStepSpec:
    """One entry of ``ensemble_scheduling.step``: model name and the two tensor maps."""

    model_name: str
    input_map: tuple[tuple[str, str], ...]
    output_map: tuple[tuple[str, str], ...]
    model_version: int = -1


@dataclass(frozen=True)
class ModelSpec:
    """Everything a config.pbtxt says, computed in Python; the template only lays it out."""

    name: str
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    served_by: Platform
    settings: StepSettings = field(default_factory=StepSettings)
    ensemble_steps: tuple[EnsembleStepSpec, ...] = ()

    @property
    def max_batch_size(self) -> int:
        return self.settings.max_batch_size

    @property
    def platform(self) -> str | None:
        """The config's ``platform:`` value, if it has one."""
        return None if self.served_by.is_backend else self.served_by.value

    @property
    def backend(self) -> str | None:
        """The config's ``backend:`` value, if it has one."""
        return self.served_by.value if self.served_by.is_backend else None


@dataclass(frozen=True)
class StepLayout:
    """What one step puts in the repository: its config, its files (relative to the model folder), notes
    for the build's report, and facts of the build (e.g. how a plan was made) for the manifest."""

    spec: ModelSpec
    files: Mapping[str, FileSource] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    info: Mapping[str, object] = field(default_factory=dict)
