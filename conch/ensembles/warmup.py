"""The ensemble's warmup payload: the one request conch runs through the DAG at build to warm every step
at load (Triton refuses model_warmup on an ensemble itself)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from conch.ensembles.samples import Sample
from conch.errors import DeclarationError


class Ensemble(Protocol):
    """What a warmup request needs of its ensemble (the Ensemble, without importing it)."""

    @property
    def name(self) -> str: ...

    @property
    def samples(self) -> Sequence[Sample]: ...

    def payload(self, inputs: Mapping[str, Any], what: str) -> dict[str, np.ndarray]: ...


@dataclass(frozen=True)
class WarmupRequest:
    """A payload, or the name of a sample whose inputs are the payload; ``count`` warmups per step."""

    sample: str | None
    inputs: Mapping[str, np.ndarray] | None
    count: int = 1

    @staticmethod
    def declare(ensemble: Ensemble, payload: Mapping[str, Any] | str, count: int) -> WarmupRequest:
        what = f"ensemble {ensemble.name!r} warmup"
        if count < 1:
            raise DeclarationError(f"{what}: count must be >= 1, got {count}")
        if isinstance(payload, str):
            return WarmupRequest(payload, None, count)
        return WarmupRequest(None, ensemble.payload(payload, what), count)

    def describe(self) -> str:
        return f"sample {self.sample!r}" if self.sample is not None else "a payload"

    def resolve(self, ensemble: Ensemble) -> dict[str, np.ndarray]:
        """The payload's arrays (a sample named here must exist by the time the ensemble is built)."""
        if self.inputs is not None:
            return dict(self.inputs)
        for sample in ensemble.samples:
            if sample.name == self.sample:
                return dict(sample.inputs)
        names = ", ".join(repr(s.name) for s in ensemble.samples) or "none"
        raise DeclarationError(
            f"ensemble {ensemble.name!r}: warmup names sample {self.sample!r}, but its samples are {names}; "
            "declare the sample or pass the payload itself to ensemble.warmup()"
        )
