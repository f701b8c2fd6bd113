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

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from conch.builder.archive import atomic_output
from conch.harness.endpoint.protocol import ValidationError


def read_configs(folder: Path) -> dict[str, model_config_pb2.ModelConfig]:
    """Every model folder's config under an unpacked archive (already through ``check_folder``)."""
    configs = {}
    for path in sorted(p for p in folder.iterdir() if p.is_dir() and (p / "config.pbtxt").is_file()):
        config = model_config_pb2.ModelConfig()
        text_format.Parse((path / "config.pbtxt").read_text(encoding="utf-8"), config)
        configs[path.name] = config
    return configs


def step_models(configs: dict[str, model_config_pb2.ModelConfig]) -> list[str]:
    """The model folders some ensemble of the archive calls as a step."""
    called = {s.model_name for c in configs.values() for s in c.ensemble_scheduling.step}
    return sorted(called & set(configs))


def isolated_name(step: str, target_model: str, attempt: int = 0) -> str:
    """A step's name of its own for ``target_model``: shell-safe, stable across reloads."""
    tag = hashlib.sha256(f"{target_model}#{attempt}".encode()).hexdigest()[:10]
    return f"{step}__t{tag}"


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
                name, attempt = isolated_name(step, target_model, attempt), attempt + 1
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
                 configs: dict[str, model_config_pb2.ModelConfig]) -> None:
    """Rename step folders under ``folder`` and every reference to them in ``configs`` (its ``read_configs``,
    changed in place): each config's ``name`` and the ensembles' ``model_name``. Nothing else in a conch
    archive depends on a step's name (model.py finds its files beside itself, EXECUTION_ENV_PATH is relative
    to the model directory)."""
    if not renames:
        return
    for old, new in renames.items():
        if (folder / new).exists():
            raise ValidationError(f"TargetModel {target_model!r}: cannot rename step {old!r} to {new!r}, the archive "
                                  "already holds a folder of that name; rename it, or serve with --step-names shared")
    for model, config in configs.items():
        touched = model in renames
        for step in config.ensemble_scheduling.step:
            if step.model_name in renames:
                step.model_name, touched = renames[step.model_name], True
        if touched:
            config.name = renames.get(model, config.name)
            with atomic_output(folder / model / "config.pbtxt") as fh:
                fh.write(text_format.MessageToString(config).encode())
    for old, new in renames.items():
        os.rename(folder / old, folder / new)

