"""The step interface every backend implements, and wiring: calling a step with tensor handles."""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from conch.ensembles.config import ModelSpec, StepSettings
from conch.ensembles.names import check_model_name
from conch.ensembles.target import Release, Target
from conch.ensembles.tensors import Tensor, TensorHandle
from conch.errors import DeclarationError

# A file in a model folder: its bytes, or a path on disk to copy.
FileSource = bytes | Path


@dataclass(frozen=True)
class StepLayout:
    """What one step puts in the repository: its config and its files (relative to the model folder)."""

    spec: ModelSpec
    files: Mapping[str, FileSource] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


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


class Step(abc.ABC):
    """A model in an ensemble. Subclasses (one per backend) say how it is laid out and configured."""

    #: Human name of the backend, as used in messages and the manifest.
    kind: ClassVar[str] = "step"

    def __init__(
        self,
        name: str,
        inputs: Sequence[Tensor],
        outputs: Sequence[Tensor],
        settings: StepSettings,
    ) -> None:
        self.name = check_model_name(name, f"{self.kind} step")
        self.inputs = tuple(inputs)
        self.outputs = tuple(outputs)
        self.settings = settings
        self._check_io()

    def _check_io(self) -> None:
        if not self.outputs:
            raise DeclarationError(f"step {self.name!r}: declare at least one output")
        for group, what in ((self.inputs, "input"), (self.outputs, "output")):
            seen: set[str] = set()
            for t in group:
                if not isinstance(t, Tensor):
                    raise DeclarationError(f"step {self.name!r}: {what}s must be conch.Tensor, got {t!r}")
                if t.name in seen:
                    raise DeclarationError(f"step {self.name!r}: {what} {t.name!r} is declared twice")
                seen.add(t.name)
        for t in self.inputs:
            if t.labels is not None:
                raise DeclarationError(f"step {self.name!r}: labels belong on outputs, not input {t.name!r}")

    @property
    def max_batch_size(self) -> int:
        return self.settings.max_batch_size

    def __call__(self, *args: TensorHandle, **kwargs: TensorHandle) -> TensorHandle | Outputs:
        """Wire this step into the ensemble its input handles belong to; return its output handles."""
        if len(args) > len(self.inputs):
            raise DeclarationError(
                f"step {self.name!r} takes {len(self.inputs)} inputs "
                f"({', '.join(t.name for t in self.inputs)}), got {len(args)} positional handles"
            )
        bound: dict[str, TensorHandle] = {}
        for spec, handle in zip(self.inputs, args, strict=False):
            bound[spec.name] = handle
        names = {t.name for t in self.inputs}
        for key, handle in kwargs.items():
            if key not in names:
                raise DeclarationError(
                    f"step {self.name!r} has no input {key!r}; its inputs are "
                    f"{', '.join(repr(t.name) for t in self.inputs)}"
                )
            if key in bound:
                raise DeclarationError(f"step {self.name!r}: input {key!r} given both by position and by name")
            bound[key] = handle
        for spec in self.inputs:
            if spec.name not in bound and not spec.optional:
                raise DeclarationError(
                    f"step {self.name!r}: required input {spec.name!r} is not connected; pass a tensor "
                    "handle for it (or declare it optional=True)"
                )
        handles = list(bound.values())
        if not handles:
            raise DeclarationError(f"step {self.name!r}: call it with at least one tensor handle")
        for h in handles:
            if not isinstance(h, TensorHandle):
                raise DeclarationError(
                    f"step {self.name!r}: inputs must be tensor handles (from ensemble.input() or another "
                    f"step), got {type(h).__name__}"
                )
        ensemble = handles[0].ensemble
        for h in handles[1:]:
            if h.ensemble is not ensemble:
                raise DeclarationError(
                    f"step {self.name!r}: {h.describe()} belongs to ensemble {h.ensemble.name!r}, "
                    f"but {handles[0].describe()} belongs to {ensemble.name!r}; a step's inputs come "
                    "from one ensemble"
                )
        outputs = ensemble._add_call(self, bound)
        return outputs[0] if len(outputs) == 1 else Outputs(outputs)

    def check(self, release: Release) -> None:  # noqa: B027 - optional hook
        """Build-time checks against artifacts and the release (raise BuildError); default: none."""

    @abc.abstractmethod
    def layout(self, model_name: str, target: Target, release: Release, ensemble: str) -> StepLayout:
        """The config and files of this step for a target (``ensemble`` names it in runtime errors)."""

    def spec(self, model_name: str, **backend: str | None) -> ModelSpec:
        """The common part of this step's config; backends add platform/backend and parameters."""
        return ModelSpec(
            name=model_name,
            inputs=self.inputs,
            outputs=self.outputs,
            platform=backend.get("platform"),
            backend=backend.get("backend"),
            settings=self.settings,
        )

    def label_files(self) -> dict[str, FileSource]:
        """Label files of classification outputs, laid out next to config.pbtxt."""
        files: dict[str, FileSource] = {}
        for t in self.outputs:
            if t.labels is None or t.label_filename is None:
                continue
            if isinstance(t.labels, Path):
                files[t.label_filename] = t.labels
            else:
                files[t.label_filename] = ("\n".join(t.labels) + "\n").encode()
        return files

    def check_settings(self) -> dict[str, object]:
        """Settings that change what ``check`` verifies beyond ``describe()``: part of the key under which a
        build remembers that the checks passed (so a weaker check never vouches for a stronger one)."""
        return {}

    def describe(self) -> dict[str, object]:
        """A JSON-safe summary for the manifest."""
        return {
            "name": self.name,
            "kind": self.kind,
            "max_batch_size": self.max_batch_size,
            "inputs": [_tensor_json(t) for t in self.inputs],
            "outputs": [_tensor_json(t) for t in self.outputs],
        }


def _tensor_json(t: Tensor) -> dict[str, object]:
    return {"name": t.name, "datatype": t.dtype.wire, "dims": list(t.dims)}
