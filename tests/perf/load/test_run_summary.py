"""The per-stage report from a run's records: stage cuts, cold vs warm, the first failure, the table."""

from __future__ import annotations

from pathlib import Path

from conch.perf.load.plots import plot_run
from conch.perf.load.run_summary import cold_flags, summarise, table
from conch.perf.load.runner import RunResult
from conch.perf.load.spec import LoadSpec, Target
from conch.perf.load.stages import Stage

T0 = 1000.0


def run(records: list[list[object]]) -> RunResult:
    spec = LoadSpec("sagemaker", "http://127.0.0.1:1", [Target("a.tar.gz", []), Target("b.tar.gz", [])],
                    [Stage(10, 2, 2), Stage(20, 4, 2)])
    timeline = [[T0, 0], [T0 + 1, 2], [T0 + 11, 4], [T0 + 20, 0]]
    return RunResult(spec, T0, T0 + 20, timeline, records, 0)


def test_requests_fall_into_the_stage_they_started_in_and_failures_name_the_user_count() -> None:
    records = [
        [T0 + 1, 900.0, True, 0, None],  # first call of a: cold
        [T0 + 1.5, 800.0, True, 0, None],  # waited for the same load: cold too
        [T0 + 3, 10.0, True, 0, None],
        [T0 + 4, 20.0, True, 1, None],  # first call of b
        [T0 + 12, 30.0, True, 1, None],
        [T0 + 10.5, 2500.0, False, 0, "HTTP 507: out of memory"],  # started at 2 users, failed at 4
        [T0 + 14, 40.0, True, 0, None],
    ]
    summary = summarise(run(records))
    first, second = summary["per_stage"]
    assert (first["users"], first["requests"], first["failures"], first["cold_requests"]) == (2, 4, 0, 3)
    assert (second["users"], second["requests"], second["failures"], second["cold_requests"]) == (4, 3, 1, 0)
    assert first["throughput_rps"] == 0.4 and second["throughput_rps"] == 0.2
    assert first["warm_p50_ms"] == 10.0
    assert summary["first_failure"] == {"users": 4, "seconds": 13.0, "stage": 2, "target": "a.tar.gz",
                                        "error": "HTTP 507: out of memory"}
    assert summary["cold"]["requests"] == 3 and summary["warm"]["requests"] == 3
    assert summary["errors"] == {"HTTP 507: out of memory": 1}
    text = table(summary)
    assert "first failed request at 4 users" in text and "7 requests, 1 failed" in text


def test_cold_means_started_before_the_first_answer_of_its_target() -> None:
    records = [[0.0, 1000.0, True, 0, None], [0.5, 600.0, True, 0, None], [1.2, 5.0, True, 0, None],
               [0.1, 50.0, False, 1, "refused"], [0.2, 10.0, True, 1, None]]
    assert cold_flags(records) == [True, True, False, True, True]


def test_a_run_without_failures_plots_both_figures(tmp_path: Path) -> None:
    summary = summarise(run([[T0 + 1, 12.0, True, 0, None], [T0 + 11, 15.0, True, 1, None]]))
    assert summary["first_failure"] is None and "no failed request" in table(summary)
    png = plot_run(summary, tmp_path / "bench.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_run_is_clean_only_without_failures_restarts_retries_or_collisions() -> None:
    from conch.endpoint.metrics import run_counts
    from conch.perf.load.run_summary import problems

    ok = summarise(run([[T0 + 2, 5.0, True, 0, ""], [T0 + 12, 5.0, True, 1, ""]]))
    assert problems(ok) == []
    before = {"TritonRestarts": 1, "TritonLookupRetries": 0, "TritonLookupMisses": 0, "StepNameCollisions": 0,
              "ModelNotReady": 0, "InvocationTimeouts": 2}
    after = {**before, "TritonRestarts": 2, "TritonLookupMisses": 3, "StepNameCollisions": 1, "InvocationTimeouts": 4,
             "step_names": "shared"}
    counts = run_counts(before, after)
    assert counts == {"step_names": "shared", "restarts": 1, "lookup_retries": 0, "lookup_misses": 3,
                      "collisions": 1, "not_ready": 0, "timeouts": 2}
    failed = summarise(run([[T0 + 2, 5.0, True, 0, ""], [T0 + 12, 5.0, False, 1, "HTTP 424"]]), {"endpoint": counts})
    assert problems(failed) == ["1 of 2 requests failed", "1 restarts", "1 collisions"]
    assert "endpoint (--step-names shared): 1 tritonserver restarts, 1 step name collisions, 3 'unknown model'" \
        in table({**failed, "not_applicable": {}})
    # timeouts are reported, not a problem of the local endpoint's making: SageMaker times calls out too
    assert "0 ModelNotReadyException, 2 timeouts\n" in table({**failed, "not_applicable": {}})
    # an endpoint that publishes no counts (a SageMaker endpoint) leaves them unknown, not zero
    assert run_counts(None, {"step_names": None})["restarts"] is None
