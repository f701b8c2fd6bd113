"""`conch plan` with inference components beside the MME: copies packed by memory, cores and accelerators, a copy
per ensemble at least, the cost side by side, and the assumptions printed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conch.cli import main
from conch.plan.capacity import Profile, Targets, Traffic
from conch.plan.components import ALARM_S, CONTAINER_START_S, copy_memory_mb, plan_components
from conch.plan.instance_data import load_instances

MIB = 2**20
TYPES = {t.name: t for t in load_instances().types}
PROFILE = Profile("text_embeddings", 195 * MIB, 10.4, None, 12 * MIB)  # benchmarks/RESULTS.md's probe figures


def test_a_copy_reserves_an_empty_server_and_one_copy_with_headroom() -> None:
    assert copy_memory_mb([PROFILE]) == 259  # (12 + 195) MiB x 1.25, rounded up


def test_cpu_types_pack_copies_by_cores_and_gpu_types_one_per_accelerator() -> None:
    traffic, targets = Traffic(20.0, instance_rps=50.0), Targets()
    cpu = plan_components([PROFILE], 5, traffic, targets, TYPES["ml.c5.xlarge"])
    assert (cpu.copies_per_instance, cpu.limited_by) == (4, "copies per instance: CPU cores")
    assert cpu.copies == 6 and cpu.instances == 2  # the busiest ensemble needs two copies of a quarter instance
    assert cpu.monthly == pytest.approx(2 * TYPES["ml.c5.xlarge"].monthly)
    gpu = plan_components([PROFILE], 5, traffic, targets, TYPES["ml.g5.xlarge"])
    assert (gpu.copies_per_instance, gpu.copies, gpu.instances) == (1, 5, 5)
    assert gpu.first_call_from_zero_s == pytest.approx(ALARM_S + CONTAINER_START_S + 10.4)
    huge = plan_components([Profile("big", 5000 * MIB, 1.0)], 1, traffic, targets, TYPES["ml.c5.large"])
    assert huge.instances is None and huge.limited_by == "one copy does not fit (memory)"


def test_plan_prints_mme_against_inference_components_with_the_assumptions(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["plan", "--ensembles", "5", "--rps", "20", "--memory-per-model", "195MiB", "--base-memory", "12MiB",
                 "--load-seconds", "10.4", "--instance-rps", "50", "--instance-type", "ml.c5.xlarge",
                 "--instance-type", "ml.g5.xlarge", "--out", str(tmp_path)])
    captured = capsys.readouterr()
    assert code == 0
    assert "the same fleet as inference components (one component per ensemble):" in captured.out
    assert ("cheapest: MME 1 x ml.c5.xlarge $149/month, hit rate 100.00%, 0.0 s per miss | inference components "
            "2 x ml.c5.xlarge $298/month, 6 copies, no cold start") in captured.out
    assert "assumption: with MinCopyCount 0 a component costs nothing idle" in captured.err
    planned = json.loads((tmp_path / "plan.json").read_text())
    assert [r["instances"] for r in planned["components"]] == [2, 5] and planned["components_assumptions"]
