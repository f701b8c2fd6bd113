"""`conch plan`: instance data, instances needed per type, costs, the table and the figure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conch.cli import main
from conch.errors import BenchError
from conch.plan.capacity import Profile, Targets, Traffic, models_per_instance, plan
from conch.plan.instance_data import GIB, HOURS_PER_MONTH, load_instances

MIB = 2**20


def test_shipped_instance_data_states_date_and_source_and_covers_mme_families() -> None:
    data = load_instances()
    assert data.date and "aws.amazon.com/sagemaker/pricing" in data.source and data.region == "us-east-1"
    families = {t.name.split(".")[1] for t in data.types}
    assert {"g4dn", "g5", "p3", "c5", "m5"} <= families
    g5 = data.pick(["ml.g5.xlarge"])[0]
    assert g5.gpu_memory_bytes == 24 * GIB and g5.price_per_hour > 0
    cpu_only = data.pick(gpu=False)
    assert cpu_only and all(t.gpu is None for t in cpu_only)
    with pytest.raises(BenchError, match="ml.nope.xlarge"):
        data.pick(["ml.nope.xlarge"])


def test_models_per_instance_takes_the_tighter_of_host_and_gpu_memory() -> None:
    data = load_instances()
    profile = Profile("p", 1 * GIB, 2.0, gpu_memory_bytes=3 * GIB, base_memory_bytes=0)
    g4dn = data.pick(["ml.g4dn.2xlarge"])[0]  # 32 GiB host, 16 GiB GPU
    assert models_per_instance([profile], g4dn, 0.9) == 4  # floor(0.9 * 16 / 3)
    m5 = data.pick(["ml.m5.xlarge"])[0]  # 16 GiB host
    assert models_per_instance([profile], m5, 0.9) == 14


def test_a_tighter_cold_start_target_or_less_skew_needs_more_instances() -> None:
    types = load_instances().pick(["ml.m5.xlarge"])
    profile = [Profile("p", 1 * GIB, 2.0)]
    loose = plan(profile, 200, Traffic(50, zipf=1.2), Targets(miss_rate=0.05), types, trace_length=5000)[0]
    tight = plan(profile, 200, Traffic(50, zipf=1.2), Targets(miss_rate=0.002), types, trace_length=5000)[0]
    flat = plan(profile, 200, Traffic(50, zipf=0.5), Targets(miss_rate=0.05), types, trace_length=5000)[0]
    assert loose.instances is not None and tight.instances is not None and flat.instances is not None
    assert loose.instances < tight.instances and loose.instances < flat.instances
    assert loose.hit_rate is not None and loose.hit_rate >= 0.95
    # the figures a user reads, worked out by hand: ml.m5.xlarge is $0.23 an hour in the shipped data (us-east-1),
    # a month is AWS's 730 hours, 200 single-model endpoints are 200 instances
    assert types[0].price_per_hour == 0.23 and HOURS_PER_MONTH == 730
    assert loose.monthly == pytest.approx(loose.instances * 167.9)
    assert loose.single_endpoints_monthly == pytest.approx(33580.0)
    assert loose.mean_wait_ms is not None and loose.wait_per_miss_s == pytest.approx(2.0)


def test_throughput_sets_a_floor_on_instances() -> None:
    types = load_instances().pick(["ml.g5.xlarge"])
    row = plan([Profile("p", 100 * MIB, 1.0)], 10, Traffic(700, instance_rps=100), Targets(), types)[0]
    assert row.instances == 10 and row.limited_by == "throughput" and row.hit_rate == 1.0


def test_an_ensemble_too_big_for_the_type_is_reported_not_planned() -> None:
    types = load_instances().pick(["ml.c5.large"])
    row = plan([Profile("big", 8 * GIB, 5.0)], 5, Traffic(10), Targets(), types)[0]
    assert row.instances is None and row.limited_by == "one ensemble does not fit"


def test_plan_command_writes_json_png_and_prints_the_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    probe = tmp_path / "probe.json"
    probe.write_text(json.dumps({"ensemble": "text_embeddings", "memory_per_copy_bytes": 300 * MIB,
                                 "load_s_mean": 2.5, "base_memory_bytes": 200 * MIB}))
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({"warm": {"p50_ms": 20.0, "p99_ms": 80.0}, "first_failure": None,
                                 "per_stage": [{"users": 1, "throughput_rps": 30.0, "failures": 0},
                                               {"users": 2, "throughput_rps": 45.0, "failures": 3}],
                                 "machine": {"cpus": 2}}))
    code = main(["plan", "--ensembles", "50", "--rps", "20", "--probe", str(probe), "--bench", str(bench),
                 "--instance-type", "ml.m5.xlarge", "--instance-type", "ml.g4dn.xlarge", "--out", str(tmp_path)])
    assert code == 0
    out, err = capsys.readouterr()
    assert "ml.m5.xlarge" in out and "ml.g4dn.xlarge" in out and "cheapest:" in out
    assert "churn: under 1 load per hour on" in err  # every ensemble fits: no load/unload races to speak of
    saved = json.loads((tmp_path / "plan.json").read_text())
    assert saved["instance_data"]["date"] and len(saved["rows"]) == 2
    assert saved["traffic"]["instance_rps"] == 30.0 and saved["traffic"]["bench_cpus"] == 2
    assert (tmp_path / "plan.png").read_bytes()[:4] == b"\x89PNG"


def test_plan_without_a_model_cost_says_what_to_give(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--ensembles", "5", "--rps", "1"]) == 2
    assert "--probe" in capsys.readouterr().err


def test_the_churn_note_names_the_release_that_guards_the_list_and_the_race_no_release_fixes() -> None:
    from conch.sagemaker.images import churn_note

    assert "(fixed in 25.12, server 2.64.0)" in churn_note("25.11")
    assert "unlocked" not in churn_note("25.12")
    for release in ("24.10", "25.12"):
        assert "can get 'unknown model' (ModelError 400) on every release so far" in churn_note(release)
        assert "%" not in churn_note(release)  # no rate that no benchmark in benchmarks/ printed


def test_the_churn_line_counts_the_cheapest_plans_loads_and_says_what_the_release_means() -> None:
    from conch.plan.capacity import Row
    from conch.plan.plan_report import churn_line

    rows = [Row("ml.m5.large", 0.115, 10, 3, 0.99, 5.0, 2.0, 80.0, 250.0, 5000.0, "miss rate"),
            Row("ml.m5.xlarge", 0.23, 20, 2, 0.995, 5.0, 2.0, 80.0, 330.0, 5000.0, "miss rate")]
    line = churn_line(rows, 20.0, "24.10")
    assert line.startswith("churn: about 720 loads and unloads per hour on 3 x ml.m5.large; release 24.10: its "
                           "SageMaker front end reads the TargetModel list unlocked"), line
