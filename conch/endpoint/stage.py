"""Staging an unpacked archive for Triton. With ``--step-names shared`` (the default, what SageMaker's image
does) every name stays as uploaded, and a TargetModel whose step models another TargetModel already uses is a
collision, reported and counted. With ``--step-names isolate`` (what ``conch deploy`` uploads: stamped copies)
the step models of a TargetModel get names of their own when another TargetModel already uses theirs.

Why: Triton 2.51 with ``--model-namespacing=true`` (as SageMaker's image runs it) loads an ensemble's steps by
name from every registered repository that holds a folder of that name, so each load or unload of one copy
of an archive reloads the ensembles (often the steps) of every loaded copy, and the server segfaults after a
few dozen loads. Renamed steps are found only in their own repository. The ensemble's own folder keeps its
name: the SageMaker front end maps it to the TargetModel.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from conch.builder.stamping import stamp_folder, stamped_name
from conch.compiler.config_reader import ReadConfig
from conch.endpoint.protocol import ValidationError
from conch.errors import ArchiveError


@dataclass
class StepClaims:
    """Which TargetModel's staged folder uses which step name (names are claimed from unpacking until its files
    are deleted)."""

    owners: dict[str, str] = field(default_factory=dict)
    users: dict[str, set[str]] = field(default_factory=dict)  # shared mode: step name -> TargetModels using it

    def share(self, target_model: str, steps: list[str]) -> dict[str, list[str]]:
        """Record ``steps`` as used by ``target_model`` too (names kept): {other TargetModel: the step names it
        shares with ``target_model``} for every TargetModel staged before with one of these names."""
        shared: dict[str, list[str]] = {}
        for step in steps:
            users = self.users.setdefault(step, set())
            for other in sorted(users - {target_model}):
                shared.setdefault(other, []).append(step)
            users.add(target_model)
        return shared

    def plan(self, target_model: str, steps: list[str]) -> dict[str, str]:
        """Claim ``steps`` for ``target_model``: {step: new name} for those another TargetModel already uses."""
        renames = {}
        for step in steps:
            name, attempt = step, 0
            while self.owners.get(name, target_model) != target_model:
                # the name `conch stamp` gives it, further ones when that is taken too
                name, attempt = stamped_name(step, target_model, attempt), attempt + 1
            self.owners[name] = target_model
            if name != step:
                renames[step] = name
        return renames

    def release(self, target_model: str) -> None:
        for name in [n for n, owner in self.owners.items() if owner == target_model]:
            del self.owners[name]
        for users in self.users.values():
            users.discard(target_model)


def rename_steps(folder: Path, target_model: str, renames: dict[str, str],
                 configs: dict[str, ReadConfig]) -> None:
    """Rename step folders under ``folder`` and every reference to them (``configs``: as its check read them),
    as `conch stamp` does (conch.builder.stamping.stamp_folder)."""
    try:
        stamp_folder(folder, renames, configs)
    except ArchiveError as exc:
        raise ValidationError(f"TargetModel {target_model!r}: {exc}, or serve with --step-names shared") from None
