"""`conch bench` counts every request it sent, once, and ends with its last stage: checked against Triton's own
statistics for each ensemble (a count the load generator does not keep)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest
from conftest import linear_ensemble

from conch.builder.repository_build import build_ensemble
from conch.ensembles.dtypes import DType
from conch.ensembles.samples import decode_array, encode_array
from conch.perf.load.bench_run import local_triton, run_bench
from conch.perf.load.spec import LoadSpec, archive_targets
from conch.perf.load.stages import Stage

pytestmark = pytest.mark.integration

# Beyond the stages, a run may take this long: starting the load process, users finishing the request they are
# in (each well under a second here), writing the records. Generous for a loaded 2-core machine; a run that
# holds its users past the last stage, as Locust does until --run-time, takes the request timeout (120 s).
MARGIN_S = 30.0


def triton_requests(url: str, model: str) -> int:
    """Requests Triton's statistics count for ``model`` (its ensemble): successes and failures."""
    response = httpx.get(f"{url}/v2/models/{model}/stats", timeout=30.0)
    response.raise_for_status()
    return sum(s["inference_stats"]["success"]["count"] + s["inference_stats"]["fail"]["count"]
               for s in response.json()["model_stats"])


def test_bench_counts_what_triton_served_and_ends_with_the_last_stage(tmp_path: Path) -> None:
    archives = [build_ensemble(linear_ensemble(name), tmp_path / "dist", "local") for name in ("count_a", "count_b")]
    targets = archive_targets(archives, body_kind="json")
    wrong = targets[1].requests[0]  # count_b "answers wrongly": each of its requests a failure, none hidden
    wrong.expected["Z"] = encode_array(decode_array(wrong.expected["Z"]) + 100, DType.FP32)
    names = [a.name for a in archives]
    with local_triton([(a, a.name) for a in archives]) as url:
        before = {name: triton_requests(url, name) for name in names}
        spec = LoadSpec("kserve", url, targets, [Stage(2, 1, 1), Stage(4, 2, 2)])
        clock = time.monotonic()
        output = run_bench(spec, tmp_path / "out")
        seconds = time.monotonic() - clock
        served = {name: triton_requests(url, name) - before[name] for name in names}
    summary = json.loads(output.json_path.read_text())
    assert seconds <= spec.duration() + MARGIN_S, f"the run took {seconds:.1f} s for {spec.duration():g} s of stages"
    records = json.loads((tmp_path / "out" / "bench-records.json").read_text())["records"]
    assert summary["requests"] == len(records) == sum(served.values()) > 0
    assert sum(s["requests"] for s in summary["per_stage"]) == summary["requests"]
    for name in names:
        assert summary["per_target"][name]["requests"] == served[name], name
    bad = summary["per_target"][names[1]]
    assert bad["failures"] == bad["requests"] == served[names[1]]
    assert summary["failures"] == sum(s["failures"] for s in summary["per_stage"]) == served[names[1]]
    assert summary["problems"] == [f"{served[names[1]]} of {summary['requests']} requests failed"]
