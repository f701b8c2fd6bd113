"""The planner's refusals through its library: a probe or bench JSON that is not one, a plan without
ensembles or traffic, figures out of range, an unknown instance type and unreadable instance data."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conch.errors import BenchError
from conch.plan.capacity import Profile, Targets, Traffic, plan
from conch.plan.instance_data import load_instances

GIVEN = Profile("given", 2**30, 2.0)


def test_a_probe_json_without_its_figures(tmp_path: Path) -> None:
    probe = tmp_path / "probe.json"
    probe.write_text(json.dumps([1, 2]))
    with pytest.raises(BenchError, match=re.escape(f"{probe}: not a probe JSON written by `conch bench --probe` (")):
        Profile.read(probe)


def test_a_probe_json_that_does_not_exist(tmp_path: Path) -> None:
    probe = tmp_path / "missing.json"
    with pytest.raises(BenchError, match=re.escape(f"{probe}: not a probe JSON written by `conch bench --probe` "
                                                   "([Errno 2] No such file or directory")):
        Profile.read(probe)


def test_a_bench_json_whose_stages_lack_failures(tmp_path: Path) -> None:
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({"warm": {"p50_ms": 5.0}, "per_stage": [{"throughput_rps": 3.0}]}))
    with pytest.raises(BenchError, match=re.escape(f"{bench}: not a bench JSON written by `conch bench` "
                                                   "('failures')")):
        Traffic.from_bench(bench, 10.0, 1.0)


@pytest.mark.parametrize(("count", "rps"), [(0, 5.0), (10, 0.0), (10, -1.0)])
def test_a_plan_needs_ensembles_and_traffic(count: int, rps: float) -> None:
    with pytest.raises(BenchError, match=re.escape("a plan needs at least one ensemble and a positive request "
                                                   "rate")):
        plan([GIVEN], count, Traffic(rps=rps), Targets(), load_instances().types)


def test_every_figure_out_of_range_is_named_in_one_refusal() -> None:
    with pytest.raises(BenchError, match=re.escape(
        "a plan cannot use these figures: --utilisation 1.5 is not in (0, 1]; --service-ms 0 is not positive; "
        "ensemble profile 'given': memory 0 bytes and load -1 s (memory must be positive, load time not negative)"
    )):
        plan([Profile("given", 0, -1.0)], 10, Traffic(rps=5.0, service_ms=0), Targets(utilisation=1.5),
             load_instances().types)


def test_an_unknown_instance_type_lists_the_known_ones() -> None:
    data = load_instances()
    known = ", ".join(t.name for t in data.types)
    with pytest.raises(BenchError, match=re.escape(
        f"instance type 'ml.m5.nope' is not in the instance data ({data.date}, {data.region}); known: {known}"
    )):
        data.pick([data.types[0].name, "ml.m5.nope"])


@pytest.mark.parametrize(("text", "why"), [
    ("[]", "list indices must be integers or slices, not str"),
    ("{", "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
    (json.dumps({"date": "2026-01-01", "source": "s", "instances": [{"type": "ml.x", "vcpu": "two"}]}),
     "invalid literal for int() with base 10: 'two'"),
])
def test_unreadable_instance_data_shows_the_shape_it_expects(tmp_path: Path, text: str, why: str) -> None:
    path = tmp_path / "instances.json"
    path.write_text(text)
    with pytest.raises(BenchError, match=re.escape(
        f'instance data {path}: unreadable ({why}); expected {{"date", "source", "instances": [{{"type", "vcpu", '
        '"memory_gib", "gpu_memory_gib", "price_per_hour"}, ...]}'
    )):
        load_instances(path)
