"""What a build learns by running the ensemble in this process (conch.run): the tensors each step receives
for the warmup payload, and how large each step's tensors get for the samples (to size shared memory).
Nothing runs when the ensemble declares no warmup and every tensor's size follows from its declaration."""

from __future__ import annotations

from dataclasses import dataclass, field

from conch.builder.shm import RowBytes, needs_samples, observe_row_bytes
from conch.builder.warmup import DerivedWarmup, derive_warmup
from conch.ensembles.ensemble import Ensemble
from conch.ensembles.target import Release, Target
from conch.errors import BuildError, ConchError


@dataclass
class Observed:
    """The derived warmup (empty when none is declared) and, per model, the largest bytes per batch row
    seen for each of its tensors over the samples (empty, with the reason, when they could not run)."""

    warmup: DerivedWarmup = field(default_factory=DerivedWarmup)
    row_bytes: RowBytes = field(default_factory=dict)
    unmeasured: str | None = None


def observe(ensemble: Ensemble, target: Target, release: Release) -> Observed:
    """Run the warmup payload and, when sizes must be measured, the samples, with the steps loaded once.
    A warmup that cannot run fails the build; samples that cannot run leave the sizes unmeasured."""
    request = ensemble.warmup_request
    measure = needs_samples(ensemble, target) and bool(ensemble.samples)
    observed = Observed()
    if request is None and not measure:
        return observed
    from conch.run import Executor

    with Executor(ensemble, release=release) as executor:
        if request is not None:
            try:
                result = executor.run(request.resolve(ensemble), intermediates=True)
            except ConchError as exc:
                raise BuildError(f"ensemble {ensemble.name!r}: warmup from {request.describe()}: running it in this "
                                 f"process failed: {exc}") from exc
            observed.warmup = derive_warmup(ensemble, request, result)
        if measure:
            try:
                runs = [executor.run(s.inputs, intermediates=True) for s in ensemble.samples]
            except ConchError as exc:
                observed.unmeasured = f"running the samples in this process failed: {exc}"
            else:
                observed.row_bytes = observe_row_bytes(ensemble, runs)
    return observed
