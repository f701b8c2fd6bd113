"""`conch bench` against conch's local MME, and the models-per-instance probe, on small archives."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import linear_ensemble

from conch.builder.repository_build import build_ensemble
from conch.cli import main

pytestmark = pytest.mark.integration

MIB = 2**20


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_ensemble(linear_ensemble("mme_load"), tmp_path_factory.mktemp("dist"), "local")


def test_bench_on_the_local_mme_answers_correctly_and_reports_its_metrics(archive: Path, tmp_path: Path) -> None:
    code = main(["bench", str(archive), "--mme", "--copies", "3", "--step-names", "isolate", "--stages", "test",
                 "--workers", "1", "--out", str(tmp_path)])
    assert code == 0
    summary = json.loads((tmp_path / "bench.json").read_text())
    assert summary["endpoint"]["step_names"] == "isolate" and summary["problems"] == []
    assert {k: summary["endpoint"][k] for k in ("restarts", "collisions", "lookup_retries")} == {
        "restarts": 0, "collisions": 0, "lookup_retries": 0}
    assert summary["endpoint"]["lookup_misses"] is not None  # the lookup race, counted on its own
    assert summary["failures"] == 0, summary["errors"]
    rows = summary["per_target"].values()
    assert len(rows) == 3 and all(row["requests"] >= 1 and row["failures"] == 0 for row in rows)
    assert sum(row["requests"] for row in rows) == summary["requests"]
    assert summary["throughput_rps"] == pytest.approx(summary["requests"] / summary["duration_s"], rel=0.05)
    assert summary["cold"]["requests"] >= 3  # every copy's first call loaded it
    # the MME's own counters, read before and after the load (README: mme_metrics_before/after in bench.json),
    # saw every request the load generator reports (and the few sent while it stopped, which the report leaves
    # out), only the first calls to each copy missing the cache
    before, after = summary["mme_metrics_before"]["ModelCacheHit"], summary["mme_metrics_after"]["ModelCacheHit"]
    hits, misses = after["hits"] - before["hits"], after["misses"] - before["misses"]
    users = max(stage["users"] for stage in summary["stages"])
    assert hits + misses >= summary["requests"], (hits, misses, summary["requests"])
    assert 3 <= misses <= summary["cold"]["requests"] + users
    assert summary["machine"]["cpus"] >= 1
    assert (tmp_path / "bench.png").read_bytes()[:4] == b"\x89PNG"


def test_probe_stops_at_the_threshold_of_a_small_budget(archive: Path, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    budget = 200 * MIB  # the empty server takes ~10 MiB here, each copy of two Python steps ~40 MiB
    code = main(["bench", "--probe", str(archive), "--memory-budget", "200MiB", "--max-copies", "20",
                 "--step-names", "isolate", "--out", str(tmp_path)])
    result = json.loads((tmp_path / "probe.json").read_text())
    assert code == 0, result["stopped_because"]
    assert result["endpoint"]["step_names"] == "isolate" and result["endpoint"]["collisions"] == 0
    assert result["stopped_because"] == "memory passed 90% of the budget"
    copies = result["copies"]
    assert 1 <= result["copies_fit"] == len(copies) - 1 < 20
    assert all(c["memory_bytes"] <= 0.9 * budget for c in copies[:-1]) and copies[-1]["memory_bytes"] > 0.9 * budget
    # memory per copy is the slope of memory against copies: near the mean growth per copy over the run
    mean_growth = (copies[-1]["memory_bytes"] - result["base_memory_bytes"]) / len(copies)
    assert 0.5 * mean_growth < result["memory_per_copy_bytes"] < 2 * mean_growth, (result, mean_growth)
    assert all(c["load_s"] > 0 for c in copies)
    assert result["gpu_memory_per_copy_bytes"] is None  # no GPU here
    assert result["load_time_grows"] is (result["load_s_last_over_first_quarter"] > 1.25)
    assert (tmp_path / "probe.png").read_bytes()[:4] == b"\x89PNG"
    assert '"copies_fit"' in capsys.readouterr().out


def test_bench_through_boto3_sagemaker_runtime(archive: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(key, "local")  # the local MME takes any credentials, as boto3 insists on some
    stages = '[{"duration": 3, "users": 2, "spawn_rate": 2}]'
    assert main(["bench", str(archive), "--mme", "--client", "boto3", "--stages", stages, "--out", str(tmp_path)]) == 0
    summary = json.loads((tmp_path / "bench.json").read_text())
    assert summary["target"]["kind"] == "boto3"
    assert summary["requests"] > 0 and summary["failures"] == 0, summary["errors"]


def test_copies_sharing_step_names_are_a_collision_that_fails_the_run(archive: Path, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """The default --step-names shared serves copies as SageMaker's image does: their step names collide, which
    the run records, and a run with a collision is not a clean run. Each user calls a copy at random: the stage
    lasts long enough for calls after the first loads (which took the whole of a 3-s stage on a busy machine,
    when both users' first calls went to one copy and the other was never loaded)."""
    stages = '[{"duration": 8, "users": 2, "spawn_rate": 2}]'
    code = main(["bench", str(archive), "--mme", "--copies", "2", "--stages", stages, "--out", str(tmp_path)])
    summary = json.loads((tmp_path / "bench.json").read_text())
    assert code == 1
    assert summary["endpoint"]["step_names"] == "shared" and summary["endpoint"]["collisions"] == 1
    assert summary["problems"][-1] == "1 collisions"
    err = capsys.readouterr().err
    # whichever copy the two users called first loaded first: the warning names both, in either order
    assert re.search(r"step name collision: TargetModels mme_load-copy00([12])\.tar\.gz and "
                     r"mme_load-copy00(?!\1)[12]\.tar\.gz both hold step models mme_load__add_one, "
                     r"mme_load__double", err), err
    assert err.strip().splitlines()[-1].endswith("bench failed: 1 collisions")


def test_json_bodies_of_an_fp16_ensemble_are_not_applicable_and_go_as_binary(tmp_path: Path) -> None:
    import half_steps
    import numpy as np

    from conch import Ensemble, PythonStep, Tensor

    ens = Ensemble("half", max_batch_size=8)
    step = PythonStep("halve", half_steps.halve, inputs=[Tensor("x", "FP16", [4])], outputs=[Tensor("y", "FP16", [4])],
                      max_batch_size=8)
    ens.output("Z", step(ens.input("X", "FP16", [4])))
    x = np.arange(8, dtype=np.float16).reshape(2, 4)
    ens.sample("two rows", {"X": x}, {"Z": x / 2})
    built = build_ensemble(ens, tmp_path / "dist", "local")
    stages = '[{"duration": 3, "users": 1, "spawn_rate": 1}]'
    code = main(["bench", str(built), "--mme", "--body", "json", "--stages", stages, "--out", str(tmp_path)])
    summary = json.loads((tmp_path / "bench.json").read_text())
    assert code == 0, summary["errors"]
    assert summary["requests"] > 0 and summary["failures"] == 0
    assert "input 'X' is FP16, output 'Z' is FP16: Triton's JSON bodies cannot carry FP16" in \
        summary["not_applicable"]["half.tar.gz"]
