"""What a run of an ensemble in this process gives: its outputs and one trace per step (the executor,
conch.executor, makes them; ``Ensemble.run`` returns them)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class StepTrace:
    """One step's execution: what the ensemble routed to it and what it gave (by the step's own tensor
    names, shaped as in its config), and where that disagrees with its declaration."""

    step: str
    kind: str
    model_name: str
    inputs: dict[str, np.ndarray]
    outputs: dict[str, np.ndarray]
    millis: float
    problems: list[str] = field(default_factory=list)


@dataclass
class RunResult:
    """The ensemble's outputs, every tensor by its ensemble-scope name (with ``intermediates=True``),
    and one trace per step in the order they ran."""

    ensemble: str
    outputs: dict[str, np.ndarray]
    tensors: dict[str, np.ndarray]
    steps: list[StepTrace]

    def __getitem__(self, name: str) -> np.ndarray:
        return self.outputs[name]

    @property
    def problems(self) -> list[str]:
        return [p for s in self.steps for p in s.problems]
