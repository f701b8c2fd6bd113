"""Instance types a plan may use: memory, GPU memory and price, from the data file shipped with conch
(which states its date and source) or a user's own file in the same format."""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from conch.errors import BenchError

GIB = 2**30
HOURS_PER_MONTH = 730.0  # AWS's convention for monthly prices


@dataclass(frozen=True)
class InstanceType:
    name: str
    vcpu: int
    memory_bytes: int
    gpu: str | None
    gpu_memory_bytes: int
    price_per_hour: float

    @property
    def monthly(self) -> float:
        return self.price_per_hour * HOURS_PER_MONTH


@dataclass(frozen=True)
class InstanceData:
    date: str
    region: str
    source: str
    types: tuple[InstanceType, ...]

    def pick(self, names: list[str] | None = None, *, gpu: bool | None = None) -> list[InstanceType]:
        """The named types (in that order), or all of them, optionally only GPU or only CPU ones."""
        if names:
            known = {t.name: t for t in self.types}
            unknown = [n for n in names if n not in known]
            if unknown:
                raise BenchError(f"instance type {unknown[0]!r} is not in the instance data ({self.date}, "
                                 f"{self.region}); known: {', '.join(known)}")
            return [known[n] for n in names]
        return [t for t in self.types if gpu is None or (t.gpu is not None) == gpu]


def load_instances(path: Path | None = None) -> InstanceData:
    """The shipped data file, or ``path``."""
    try:
        text = path.read_text() if path else resources.files("conch.plan").joinpath("instances.json").read_text()
        raw: dict[str, Any] = json.loads(text)
        types = tuple(
            InstanceType(i["type"], int(i["vcpu"]), int(float(i["memory_gib"]) * GIB), i.get("gpu"),
                         int(float(i.get("gpu_memory_gib") or 0) * GIB), float(i["price_per_hour"]))
            for i in raw["instances"]
        )
        return InstanceData(str(raw["date"]), str(raw.get("region", "")), str(raw["source"]), types)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BenchError(f"instance data {path or 'shipped with conch'}: unreadable ({exc}); expected "
                         '{"date", "source", "instances": [{"type", "vcpu", "memory_gib", "gpu_memory_gib", '
                         '"price_per_hour"}, ...]}') from None
