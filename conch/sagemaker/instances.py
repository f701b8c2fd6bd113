"""Which instance types can host a Triton MME: CPU instances, and single-GPU ones for GPU MMEs."""

from __future__ import annotations

import re

from conch.errors import DeployError

# GPU MMEs run on single-GPU instances; AWS documents the g4dn, g5 and p3 families for them.
MME_GPU_FAMILIES = ("g4dn", "g5", "p3")

_SINGLE = ("xlarge", "2xlarge", "4xlarge", "8xlarge", "16xlarge")
# GPUs per size for the NVIDIA GPU families SageMaker offers; a size not listed is a single-GPU one.
GPUS_PER_INSTANCE: dict[str, dict[str, int]] = {
    "g4dn": {**dict.fromkeys(_SINGLE, 1), "12xlarge": 4, "metal": 8},
    "g5": {**dict.fromkeys(_SINGLE, 1), "12xlarge": 4, "24xlarge": 4, "48xlarge": 8},
    "g6": {**dict.fromkeys(_SINGLE, 1), "12xlarge": 4, "24xlarge": 4, "48xlarge": 8},
    "g6e": {**dict.fromkeys(_SINGLE, 1), "12xlarge": 4, "24xlarge": 4, "48xlarge": 8},
    "p2": {"xlarge": 1, "8xlarge": 8, "16xlarge": 16},
    "p3": {"2xlarge": 1, "8xlarge": 4, "16xlarge": 8},
    "p3dn": {"24xlarge": 8},
    "p4d": {"24xlarge": 8},
    "p4de": {"24xlarge": 8},
    "p5": {"48xlarge": 8},
    "p5e": {"48xlarge": 8},
    "p5en": {"48xlarge": 8},
}

_PATTERN = re.compile(r"ml\.([a-z][a-z0-9-]*)\.([a-z0-9]+)")


def gpus(instance_type: str) -> int:
    """GPUs of an ``ml.<family>.<size>`` instance type (0 for CPU instances and unknown families)."""
    match = _PATTERN.fullmatch(instance_type)
    if not match:
        return 0
    family, size = match.groups()
    return GPUS_PER_INSTANCE.get(family, {}).get(size, 0)


def check_instance_type(instance_type: str) -> list[str]:
    """Refuse what a Triton MME cannot run on; return warnings about what AWS may not support."""
    match = _PATTERN.fullmatch(instance_type)
    if not match:
        raise DeployError(
            f"instance type {instance_type!r}: SageMaker names them ml.<family>.<size>, e.g. ml.g5.xlarge"
        )
    family, size = match.groups()
    sizes = GPUS_PER_INSTANCE.get(family)
    if sizes is None:
        return []  # a CPU instance: MMEs run on those with the same Triton image
    count = sizes.get(size)
    if count is None:
        return [f"{instance_type}: conch does not know this {family} size; GPU MMEs need a single-GPU instance"]
    if count > 1:
        singles = [f"ml.{family}.{s}" for s, n in sizes.items() if n == 1]
        instead = f"use {', '.join(singles)}" if singles else f"use a single-GPU {'/'.join(MME_GPU_FAMILIES)} instance"
        raise DeployError(
            f"instance type {instance_type} has {count} GPUs, but SageMaker GPU multi-model endpoints run on "
            f"single-GPU instances only; {instead}, and scale out with --instance-count / --max-instances"
        )
    if family not in MME_GPU_FAMILIES:
        return [
            f"{instance_type}: GPU multi-model endpoints are documented for the {', '.join(MME_GPU_FAMILIES)} "
            "families; check AWS's list of instances supported for multi-model endpoints before relying on it"
        ]
    return []
