"""The step interface every backend implements; calling a step wires it into an ensemble (Ensemble.call)."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from conch.ensembles.config import StepSettings
from conch.ensembles.layout import FileSource, ModelSpec, StepLayout
from conch.ensembles.names import check_model_name
from conch.ensembles.target import Release, Target
from conch.ensembles.tensors import Tensor
from conch.errors import DeclarationError


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

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Wire this step into the ensemble its input handles belong to; return its output handle (or
        ``Outputs`` for several). See ``Ensemble.call``."""
        values = [*args, *kwargs.values()]
        if not values:
            raise DeclarationError(f"step {self.name!r}: call it with at least one tensor handle")
        ensemble = getattr(values[0], "ensemble", None)
        if ensemble is None:
            raise DeclarationError(
                f"step {self.name!r}: inputs must be tensor handles (from ensemble.input() or another "
                f"step), got {type(values[0]).__name__}"
            )
        return ensemble.call(self, *args, **kwargs)

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
