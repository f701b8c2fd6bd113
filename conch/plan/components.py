"""The inference-component side of a plan: every ensemble a component with its own copies (each a container
holding one loaded copy, reserving its memory, CPU cores and, on a GPU type, one accelerator), packed onto
instances of one type; what that costs per month against the MME's figures, and its cold starts."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from conch.plan.capacity import Profile, Targets, Traffic
from conch.plan.instance_data import InstanceType
from conch.plan.simulate import zipf_weights
from conch.sagemaker.component_resources import HEADROOM, measured_mb
from conch.sagemaker.instances import gpus

# What a component scaled to zero waits before its first copy serves, besides the copy's own load: the alarm on
# NoCapacityInvocationFailures (30 s period, one datapoint) and the step policy, then the container's start.
# AWS documents "several minutes" for an instance provisioned from zero; no figure for a copy on a running one.
ALARM_S = 60.0
CONTAINER_START_S = 60.0  # assumed: image pull cached on the instance, Triton up; not measured here


@dataclass
class ComponentRow:
    instance_type: str
    price_per_hour: float
    copy_memory_mb: int
    copies_per_instance: int
    copies: int | None
    instances: int | None
    monthly: float | None
    first_call_from_zero_s: float | None  # with MinCopyCount 0: alarm + container start + the copy's load
    limited_by: str


def copy_memory_mb(profiles: Sequence[Profile]) -> int:
    """One copy's reservation, as `conch deploy --components` derives it from a probe: an empty server plus one
    copy, with headroom; the largest of the profiles (each ensemble reserves its own, the plan takes the worst)."""
    return max(measured_mb({"memory_per_copy_bytes": p.memory_bytes, "base_memory_bytes": p.base_memory_bytes})
               for p in profiles)


def plan_components(profiles: Sequence[Profile], count: int, traffic: Traffic, targets: Targets,
                    itype: InstanceType, *, threshold: float = 0.9, cpus_per_copy: float = 1.0) -> ComponentRow:
    """Copies each ensemble needs for its share of the traffic (at least one: no cold start), and the instances
    of ``itype`` they fill."""
    memory = copy_memory_mb(profiles)
    load_s = max(p.load_s for p in profiles)
    accelerators = gpus(itype.name)
    by_memory = math.floor(threshold * itype.memory_bytes / (memory * 2**20))
    by_cpu = math.floor(itype.vcpu / cpus_per_copy)
    per_instance = min(by_memory, by_cpu, accelerators) if accelerators else min(by_memory, by_cpu)
    limits = {"memory": by_memory, "CPU cores": by_cpu, **({"accelerators": accelerators} if accelerators else {})}
    limited_by = min(limits, key=lambda k: limits[k])
    row = ComponentRow(itype.name, itype.price_per_hour, memory, per_instance, None, None, None,
                       ALARM_S + CONTAINER_START_S + load_s, f"copies per instance: {limited_by}")
    if per_instance < 1:
        row.limited_by = f"one copy does not fit ({limited_by})"
        return row
    instance_rps = traffic.rps_of(itype)
    copy_rps = None if instance_rps is None else instance_rps * (1.0 if accelerators else cpus_per_copy / itype.vcpu)
    shares = zipf_weights(count, traffic.zipf) * traffic.rps
    per_ensemble = [1 if copy_rps is None else max(1, math.ceil(s / (targets.utilisation * copy_rps))) for s in shares]
    row.copies = sum(per_ensemble)
    row.instances = math.ceil(row.copies / per_instance)
    row.monthly = row.instances * itype.monthly
    return row


def components_table(rows: Sequence[ComponentRow], mme_monthly: dict[str, float | None]) -> str:
    header = ("instance type", "copy MiB", "copies/inst", "copies", "instances", "IC $/month", "MME $/month",
              "cold starts", "first call from 0 (s)", "limited by")
    body = [(r.instance_type, r.copy_memory_mb, r.copies_per_instance, _v(r.copies), _v(r.instances),
             _v(r.monthly, "{:,.0f}"), _v(mme_monthly.get(r.instance_type), "{:,.0f}"), "none (>= 1 copy)",
             _v(r.first_call_from_zero_s, "{:.0f}"), r.limited_by) for r in rows]
    widths = [max(len(str(x[i])) for x in [header, *body]) for i in range(len(header))]
    lines = ["  ".join(str(v).ljust(w) if i in (0, 7, 9) else str(v).rjust(w)
                       for i, (v, w) in enumerate(zip(row, widths, strict=True))) for row in [header, *body]]
    return "\n".join(lines)


def assumptions(cpus_per_copy: float) -> list[str]:
    """What the inference-component figures rest on, one line each."""
    return [
        f"inference components: one copy reserves an empty server plus one loaded copy (the probe's figures) x "
        f"{HEADROOM:g}, {cpus_per_copy:g} CPU cores, and on a GPU type one whole accelerator (so one copy per GPU); "
        "copies are packed by the tightest of memory, cores and accelerators; SageMaker's own agent's share of the "
        "instance is not known here",
        "each ensemble keeps at least one copy (MinCopyCount 1: no cold start, no eviction by a neighbour) and gets "
        "more for its Zipf share of the traffic at the utilisation target; a copy on a CPU type serves the bench's "
        "instance throughput scaled by its share of the vCPUs",
        f"with MinCopyCount 0 a component costs nothing idle, and its first call after idling is refused until a copy "
        f"is up: about {ALARM_S:.0f} s for the NoCapacityInvocationFailures alarm and step policy, "
        f"{CONTAINER_START_S:.0f} s assumed for the container's start (not measured), and the copy's measured load "
        "time; more when the endpoint scaled to zero instances (AWS: several minutes)",
        "the MME side: the simulated LRU fleet above (cache misses wait the measured load time)",
    ]


def _v(value: float | int | None, fmt: str = "{}") -> str:
    return "-" if value is None else fmt.format(value)
