"""What one copy of an inference component reserves on an instance (``ComputeResourceRequirements``): memory from
what ``conch bench --probe`` measured of the archive, CPU cores, accelerators, with a per-ensemble override."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conch.errors import DeployError

MIB = 2**20
MIN_MEMORY_MB = 128  # the API's minimum for MinMemoryRequiredInMb (botocore's MemoryInMb shape)
HEADROOM = 1.25  # over the measured figure: a copy's memory grows with its batch and the stubs' shared memory
UNMEASURED_MEMORY_MB = 1024  # assumed for an archive no probe measured (said in a warning)
DEFAULT_CPUS = 1.0


@dataclass(frozen=True)
class Resources:
    """One copy's reservation and where its memory figure comes from (``source``: measured, given, assumed)."""

    memory_mb: int
    cpus: float = DEFAULT_CPUS
    accelerators: int = 0
    source: str = "assumed"

    def __post_init__(self) -> None:
        if self.memory_mb < MIN_MEMORY_MB:
            raise DeployError(f"component memory {self.memory_mb} MiB: SageMaker takes at least {MIN_MEMORY_MB} MiB "
                              "per copy (MinMemoryRequiredInMb)")
        if not self.cpus > 0 or self.accelerators < 0:
            raise DeployError(f"component CPUs {self.cpus:g} and accelerators {self.accelerators}: give a positive "
                              "number of cores and zero or more accelerators")

    def requirements(self) -> dict[str, Any]:
        """The ``ComputeResourceRequirements`` of ``create_inference_component``."""
        required: dict[str, Any] = {"NumberOfCpuCoresRequired": float(self.cpus),
                                    "MinMemoryRequiredInMb": self.memory_mb}
        if self.accelerators:
            required["NumberOfAcceleratorDevicesRequired"] = float(self.accelerators)
        return required


def measured_mb(probe: Mapping[str, Any]) -> int:
    """One copy's memory from a probe JSON: an empty server plus one copy (one container per copy on an IC
    endpoint), with headroom, rounded up to whole MiB."""
    one = int(probe.get("base_memory_bytes", 0)) + int(probe["memory_per_copy_bytes"])
    return max(MIN_MEMORY_MB, math.ceil(one * HEADROOM / MIB))


def read_probes(paths: Sequence[Path]) -> dict[str, dict[str, Any]]:
    """Probe JSONs by the archive file name and by the ensemble they measured."""
    found: dict[str, dict[str, Any]] = {}
    for path in paths:
        try:
            raw = json.loads(path.read_text())
            keys = [str(raw["archive"]), str(raw["ensemble"])]
            int(raw["memory_per_copy_bytes"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise DeployError(f"{path}: not a probe JSON written by `conch bench --probe` ({exc})") from None
        found.update(dict.fromkeys(keys, raw))
    return found


def read_overrides(path: Path | None) -> dict[str, dict[str, Any]]:
    """``--resources FILE``: ``{"<ensemble or archive>": {"memory_mb": N, "cpus": N, "accelerators": N}}``."""
    if path is None:
        return {}
    allowed = {"memory_mb", "cpus", "accelerators"}
    try:
        raw = json.loads(path.read_text())
        if not isinstance(raw, dict) or not all(isinstance(v, dict) for v in raw.values()):
            raise ValueError("expected an object of objects")
    except (OSError, ValueError) as exc:
        raise DeployError(f"--resources {path}: {exc}; write {{\"<ensemble>\": {{\"memory_mb\": 2048, \"cpus\": 2, "
                          "\"accelerators\": 1}}}}") from None
    for name, fields in raw.items():
        unknown = set(fields) - allowed
        if unknown:
            raise DeployError(f"--resources {path}: {name!r} has {', '.join(sorted(unknown))}; the fields are "
                              f"{', '.join(sorted(allowed))}")
    return raw


def resources_for(
    archive: str,
    ensemble: str,
    *,
    accelerators: int,
    probes: Mapping[str, Mapping[str, Any]] | None = None,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
    memory_mb: int | None = None,
    cpus: float | None = None,
) -> Resources:
    """The reservation of one archive's component: its entry in ``overrides`` (by ensemble or archive name) wins
    over ``memory_mb``/``cpus`` given for every component, which win over a probe's measurement, which wins over
    the assumed figure."""
    own = dict((overrides or {}).get(ensemble) or (overrides or {}).get(archive) or {})
    probe = (probes or {}).get(archive) or (probes or {}).get(ensemble)
    if "memory_mb" in own:
        memory, source = int(own["memory_mb"]), "given per ensemble"
    elif memory_mb is not None:
        memory, source = memory_mb, "given"
    elif probe is not None:
        memory, source = measured_mb(probe), f"measured x{HEADROOM:g}"
    else:
        memory, source = UNMEASURED_MEMORY_MB, "assumed (not measured)"
    return Resources(memory, float(own.get("cpus", cpus if cpus is not None else DEFAULT_CPUS)),
                     int(own.get("accelerators", accelerators)), source)
