"""Compile once: an ensemble declaration made, for one target and release, into a frozen plan that every
consumer reads (the repository's renderer, the in-process executor, warmup derivation, shared-memory
sizing, the samples and the manifest): validated once, each step laid out and checked once."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from conch.ensembles.ensemble import Ensemble, StepCall, TensorHandle
from conch.ensembles.environment import PythonEnv
from conch.ensembles.layout import ModelSpec, Platform, StepLayout
from conch.ensembles.samples import Sample
from conch.ensembles.step import Step
from conch.ensembles.target import Release, Target
from conch.ensembles.tensors import Tensor
from conch.ensembles.warmup import WarmupRequest
from conch.errors import BuildError, ConchError

# How a step is laid out and checked: (step, model name, target, release, ensemble name) -> its layout.
# The builder passes one that remembers the checks that passed; by default every check runs.
LayoutChecker = Callable[[Step, str, Target, Release, str], StepLayout]


def checked_layout(step: Step, model: str, target: Target, release: Release, ensemble: str) -> StepLayout:
    """The step's layout after its build-time checks (a layout may assume a checked declaration)."""
    step.check(release)
    return step.layout(model, target, release, ensemble)


@dataclass(frozen=True)
class CompiledStep:
    """One step of the plan: its model name, its checked layout for the target, the environment it runs
    in and how the ensemble wires it."""

    call: StepCall
    layout: StepLayout  # its spec's name is the step's model name (checked when compiled)
    env: PythonEnv | None
    inputs: tuple[tuple[str, str], ...]  # (step input, ensemble tensor) in wiring order
    outputs: tuple[tuple[str, str], ...]  # (step output, ensemble tensor), discarded ones too

    @property
    def step(self) -> Step:
        return self.call.step

    @property
    def model_name(self) -> str:
        return self.layout.spec.name

    @property
    def spec(self) -> ModelSpec:
        """The step's config in this target, before the build adds its environment and warmup."""
        return self.layout.spec

    @property
    def served_as(self) -> str:
        """What serves the model in this target: its config's platform or backend."""
        return str(self.layout.spec.platform or self.layout.spec.backend)

    @property
    def python_in_production(self) -> bool:
        """Whether the step is a Python-backend model in production (whatever serves it in this target)."""
        return self.call.step.platform is Platform.PYTHON

    def sized(self) -> list[tuple[str, Tensor]]:
        """Each tensor of the step under its shared-memory key ("input x" / "output y")."""
        step = self.call.step
        return [(f"input {t.name}", t) for t in step.inputs] + [(f"output {t.name}", t) for t in step.outputs]

    def summary(self) -> dict[str, object]:
        """The step as the manifest records it: name, kind, max_batch_size, I/O and what its backend adds
        (its settings and the facts of its layout, under its kind)."""
        step = self.call.step
        return describe_step(step, self.layout.info)


def describe_step(step: Step, built: Mapping[str, object] | None = None) -> dict[str, object]:
    """A JSON-safe summary of a step for the manifest; ``built``: the facts of its layout."""
    info: dict[str, object] = {
        "name": step.name,
        "kind": step.kind,
        "max_batch_size": step.max_batch_size,
        "inputs": [_tensor_json(t) for t in step.inputs],
        "outputs": [_tensor_json(t) for t in step.outputs],
    }
    own = {**step.details(), **(built or {})}
    if own:
        info[step.kind] = own
    return info


def _tensor_json(t: Tensor) -> dict[str, object]:
    return {"name": t.name, "datatype": t.dtype.wire, "dims": list(t.dims)}


@dataclass(frozen=True)
class CompiledEnsemble:
    """An ensemble compiled for one target and release: its steps in wiring order, its own config (the
    model spec) and I/O. The declaration stays reachable for what only it holds: the wiring's handles,
    the samples and the warmup request."""

    ensemble: Ensemble
    target: Target
    release: Release
    steps: tuple[CompiledStep, ...]
    spec: ModelSpec
    samples: tuple[Sample, ...]
    warmup_request: WarmupRequest | None
    checker: LayoutChecker = checked_layout

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def description(self) -> str:
        return self.ensemble.description

    @property
    def max_batch_size(self) -> int:
        return self.spec.max_batch_size

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        return self.spec.inputs

    @property
    def outputs(self) -> tuple[Tensor, ...]:
        return self.spec.outputs

    def payload(self, inputs: Mapping[str, Any], what: str) -> dict[str, np.ndarray]:
        """A request's inputs as arrays of the declared dtypes (see ``Ensemble.payload``)."""
        return self.ensemble.payload(inputs, what)

    def tensor_name(self, handle: TensorHandle) -> str:
        return self.ensemble.tensor_name(handle)

    @property
    def plain_model(self) -> CompiledStep | None:
        """The step built alone, without an ensemble around it (a single-model archive, served as the TargetModel:
        one scheduler hop less), for a DAG of one step whose callers cannot tell the difference; else None."""
        if len(self.steps) != 1 or self.ensemble.keep_ensemble or self.kept_because() is not None:
            return None
        return self.steps[0]

    def kept_because(self) -> str | None:
        """Why a DAG of one step keeps its ensemble (None: it need not): the model alone would answer callers of
        the TargetModel differently from the ensemble."""
        if len(self.steps) != 1:
            return None
        (step,) = self.steps
        ensemble_outputs = {t.name for t in self.outputs}
        extra = [s for s, e in step.outputs if e not in ensemble_outputs]
        if extra:
            return (f"step {step.step.name!r} also returns {', '.join(extra)}, which the ensemble does not; alone it "
                    "would answer with them")
        renamed = [f"input {s!r} reads {e!r}" for s, e in step.inputs if s != e]
        renamed += [f"output {s!r} is written as {e!r}" for s, e in step.outputs if s != e]
        if renamed:
            return (f"step {step.step.name!r} names its tensors differently from the ensemble ({'; '.join(renamed)}), "
                    "and callers of the TargetModel use the ensemble's names")
        if step.spec.max_batch_size != self.max_batch_size:
            return (f"step {step.step.name!r}'s max_batch_size {step.spec.max_batch_size} differs from the "
                    f"ensemble's {self.max_batch_size}")
        declared = {(t.name, t.dtype, t.dims) for t in (*self.inputs, *self.outputs)}
        differ = [t.name for t in (*step.spec.inputs, *step.spec.outputs)
                  if (t.name, t.dtype, t.dims) not in declared and not t.optional]
        if differ:
            return (f"step {step.step.name!r} declares {', '.join(differ)} with other types or dims than the "
                    "ensemble")
        if any(rel.startswith("../") for rel in step.layout.files):
            return f"step {step.step.name!r} lays out files beside its model folder"
        if self.ensemble.config_fields:
            return "the ensemble sets config fields of its own"
        return None

    def local(self) -> CompiledEnsemble:
        """The plan for the local target (what runs in this process): this one, or the same declaration
        compiled for it with the same checker."""
        if self.target is Target.LOCAL:
            return self
        return _compiled(self.ensemble, Target.LOCAL, self.release, self.checker)  # validated already


def compile_ensemble(
    ensemble: Ensemble,
    target: Target | str,
    release: Release | str,
    checker: LayoutChecker = checked_layout,
) -> CompiledEnsemble:
    """Validate the declaration and lay out and check each of its steps for ``target`` and ``release``."""
    target, release = Target.of(target), Release.of(release)
    ensemble.validate()
    return _compiled(ensemble, target, release, checker)


def _compiled(ensemble: Ensemble, target: Target, release: Release, checker: LayoutChecker) -> CompiledEnsemble:
    steps = []
    for call in ensemble.calls:
        model = ensemble.model_name(call.step)
        try:
            layout = checker(call.step, model, target, release, ensemble.name)
        except ConchError as exc:
            exc.within(f"ensemble {ensemble.name!r}")
            raise
        if layout.spec.name != model:
            raise BuildError(f"step {call.step.name!r} laid out model {layout.spec.name!r}, expected {model!r}")
        inputs = tuple((name, ensemble.tensor_name(h)) for name, h in call.inputs.items())
        outputs = tuple((name, ensemble.tensor_name(h)) for name, h in call.outputs.items())
        steps.append(CompiledStep(call, layout, ensemble.env_of(call.step), inputs, outputs))
    return CompiledEnsemble(ensemble, target, release, tuple(steps), ensemble.spec(), tuple(ensemble.samples),
                             ensemble.warmup_request, checker)
