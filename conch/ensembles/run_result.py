"""What a run of an ensemble in this process gives: its outputs and one trace per step (the executor,
conch.executor, makes them; ``Ensemble.run`` returns them)."""

from __future__ import annotations

import html
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

PREVIEW = 6  # values of a tensor a table shows, before "..."


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

    def _repr_html_(self) -> str:
        """Jupyter's display: one row per step with what went in and what came out, then the ensemble's outputs
        (every name and value escaped)."""
        head = ("<tr><th>step</th><th>kind</th><th>model</th><th>inputs</th><th>outputs</th><th>ms</th>"
                "<th>problems</th></tr>")
        dropped = '<td colspan="2"><i>not kept: run(..., intermediates=True) keeps them</i></td>'
        rows = [f"<tr><td>{_e(s.step)}</td><td>{_e(s.kind)}</td><td>{_e(s.model_name)}</td>"
                + (f"<td>{tensors_html(s.inputs)}</td><td>{tensors_html(s.outputs)}</td>" if s.inputs or s.outputs
                   else dropped)
                + f"<td>{s.millis:.2f}</td><td>{'<br/>'.join(_e(p) for p in s.problems)}</td></tr>"
                for s in self.steps]
        return (f"<div><b>ensemble {_e(self.ensemble)}</b>: {len(self.steps)} steps ran"
                f"<table>{head}{''.join(rows)}</table>"
                f"<b>outputs</b>{tensors_html(self.outputs)}</div>")


def _e(value: object) -> str:
    return html.escape(str(value))


def tensors_html(tensors: Mapping[str, np.ndarray]) -> str:
    """Tensors as an HTML list: name, dtype, shape and the first values."""
    items = []
    for name, array in tensors.items():
        flat = np.asarray(array).ravel()
        shown = ", ".join(repr(v) if isinstance(v, bytes) else f"{v:.6g}" if isinstance(v, float | np.floating)
                          else str(v) for v in flat[:PREVIEW].tolist())
        more = ", ..." if flat.size > PREVIEW else ""
        items.append(f"<li><code>{_e(name)}</code> {_e(array.dtype)} {_e(list(np.shape(array)))}: "
                     f"[{_e(shown)}{more}]</li>")
    return f"<ul>{''.join(items)}</ul>"
