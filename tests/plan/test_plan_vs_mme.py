"""The plan's simulation against reality: the same trace on the local MME and on the simulated instance."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import httpx
import pytest
from conftest import linear_ensemble

from conch.builder.repository_build import build_ensemble
from conch.cli import main
from conch.endpoint import LocalMME
from conch.perf.load.bench_run import copy_names, local_mme
from conch.perf.load.spec import Target, archive_targets
from conch.plan.simulate import simulate, zipf_trace
from conch.wire import TARGET_HEADER

pytestmark = pytest.mark.integration

# Both sides run LRU by count over one instance and see the requests in the same order, one at a time, so they
# should agree exactly; the margin allows for the MME counting a request differently around an eviction.
MARGIN = 0.05
MIB = 2**20


def measured_hit_rate(mme: LocalMME, targets: list[Target], trace: list[int]) -> float:
    """The MME's ModelCacheHit rate over ``trace`` sent in order, one request at a time."""
    before = mme.metrics_json()["ModelCacheHit"]
    with httpx.Client(timeout=300) as http:
        for index in trace:
            target = targets[index]
            request = target.requests[0]
            answer = http.post(f"{mme.url}/endpoints/{mme.endpoint_name}/invocations",
                               content=base64.b64decode(request.body),
                               headers={"Content-Type": request.content_type, TARGET_HEADER: target.name})
            assert answer.status_code == 200, (target.name, answer.text[:200])
    after = mme.metrics_json()["ModelCacheHit"]
    hits, misses = after["hits"] - before["hits"], after["misses"] - before["misses"]
    assert hits + misses == len(trace)  # each invocation counted once
    return hits / len(trace)


@pytest.mark.parametrize("copies, length, max_loaded", [
    (4, 20, 2),
    pytest.param(8, 150, 3, marks=pytest.mark.slow),
])
def test_predicted_hit_rate_matches_the_local_mme(tmp_path: Path, copies: int, length: int, max_loaded: int) -> None:
    # distinct ensembles, not copies of one archive: Triton 2.51 reloads every loaded copy's ensemble when a
    # copy with the same step names loads or unloads, and crashed after dozens of loads (README, known limits)
    archives = [build_ensemble(linear_ensemble(f"plan_check{i}"), tmp_path, "local") for i in range(copies)]
    named = copy_names(archives)
    targets = archive_targets(archives, body_kind="json")
    trace = zipf_trace(len(targets), length, 1.0, seed=3)
    predicted = simulate(trace, [1] * len(targets), [0.0] * len(targets), 1, max_loaded).hit_rate
    with local_mme(named, max_loaded=max_loaded, step_names="isolate") as mme:
        measured = measured_hit_rate(mme, targets, trace)
    assert 0.2 < predicted < 0.9  # the trace both hits and misses, so the comparison means something
    assert abs(predicted - measured) <= MARGIN, (predicted, measured)


def test_plan_measures_archives_on_the_spot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    archive = build_ensemble(linear_ensemble("plan_measure"), tmp_path, "local")
    code = main(["plan", "--ensembles", "20", "--rps", "5", "--measure", str(archive), "--measure-copies", "2",
                 "--instance-type", "ml.m5.large", "--out", str(tmp_path)])
    assert code == 0
    (profile,) = json.loads((tmp_path / "plan.json").read_text())["profiles"]
    assert profile["name"] == "plan_measure"
    # a copy of two Python steps is two stubs of tens of MiB each (~40 MiB per copy here, see test_bench_mme.py),
    # loaded in seconds: a figure far outside that means the measurement, not the archive, is wrong
    assert 5 * MIB < profile["memory_bytes"] < 400 * MIB, profile
    assert 0.01 < profile["load_s"] < 120, profile
    assert "ml.m5.large" in capsys.readouterr().out
