"""A plan asked for without what it needs says what to give."""

from __future__ import annotations

import pytest

from conch.errors import BenchError
from conch.plan.capacity import Profile, Targets, Traffic, plan
from conch.plan.instance_data import load_instances


def test_a_plan_without_any_ensemble_profile_says_where_profiles_come_from() -> None:
    types = load_instances().types
    with pytest.raises(BenchError, match=r"a plan needs at least one ensemble profile \(a probe JSON, or "
                                         r"--memory-per-model\)"):
        plan([], 10, Traffic(rps=5.0), Targets(), types)


@pytest.mark.parametrize(("traffic", "targets", "threshold", "words"), [
    (Traffic(rps=5.0, zipf=-1), Targets(), 0.9, r"--zipf -1 is negative"),
    (Traffic(rps=5.0), Targets(miss_rate=2), 0.9, r"--miss-rate 2 is not in \[0, 1\]"),
    (Traffic(rps=5.0), Targets(utilisation=0), 0.9, r"--utilisation 0 is not in \(0, 1\]"),
    (Traffic(rps=5.0), Targets(), -1, r"--threshold -1 is not in \(0, 1\]"),
    (Traffic(rps=5.0, service_ms=0), Targets(), 0.9, r"--service-ms 0 is not positive"),
    (Traffic(rps=5.0, instance_rps=0), Targets(), 0.9, r"--instance-rps 0 is not positive"),
    (Traffic(rps=5.0), Targets(p99_ms=-5), 0.9, r"--p99-ms -5 is not positive"),
])
def test_figures_out_of_range_are_refused_not_planned(
    traffic: Traffic, targets: Targets, threshold: float, words: str
) -> None:
    types = load_instances().types
    with pytest.raises(BenchError, match=words):
        plan([Profile("given", 2**30, 2.0)], 10, traffic, targets, types, threshold=threshold)


@pytest.mark.parametrize(("memory", "load_s"), [(0, 2.0), (2**30, -1.0)])
def test_a_profile_without_memory_or_with_a_negative_load_time_is_refused(memory: int, load_s: float) -> None:
    types = load_instances().types
    with pytest.raises(BenchError, match="memory must be positive, load time not negative"):
        plan([Profile("given", memory, load_s)], 10, Traffic(rps=5.0), Targets(), types)
