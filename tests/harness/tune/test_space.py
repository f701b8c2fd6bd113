"""The tune's space: knobs read from and written into Triton's config JSON, the grid inside the CPU budget, the
traffic mix, and the moves the figures point to (from a profile assembled out of statistics snapshots)."""

from __future__ import annotations

from typing import Any

import pytest

from conch.errors import BenchError
from conch.harness.profile.dag import dag_of
from conch.harness.profile.profile_report import RunInfo, assemble
from conch.harness.tune.search import moves
from conch.harness.tune.space import Knobs, Levels, Settings, StepSpace, apply_knobs, grid, grid_size, knobs_of
from conch.harness.tune.trial import Level, Trial, load_route, weights_of

ONNX = StepSpace("e.tar.gz", "e__encoder", "encoder", "onnx", 8)
PY = StepSpace("e.tar.gz", "e__pool", "pool", "python", 8)
FLAT = StepSpace("e.tar.gz", "e__flat", "flat", "python", 0)


def config(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "backend": "python", "max_batch_size": 8,
            "instance_group": [{"name": f"{name}_0", "kind": "KIND_GPU", "count": 2, "gpus": [0]}],
            "parameters": {"EXECUTION_ENV_PATH": {"string_value": "$$TRITON_MODEL_DIRECTORY/env"}}, **extra}


def test_knobs_round_trip_through_the_config_and_keep_what_they_do_not_set() -> None:
    knobs = Knobs(3, True, 2000, (4, 8), (("intra_op_thread_count", 1),))
    new = apply_knobs(config("e__encoder"), ONNX, knobs)
    assert new["instance_group"] == [{"kind": "KIND_GPU", "count": 3, "gpus": [0]}]
    assert new["dynamic_batching"] == {"preferred_batch_size": [4, 8], "max_queue_delay_microseconds": 2000}
    assert new["parameters"]["intra_op_thread_count"] == {"string_value": "1"}
    assert new["parameters"]["EXECUTION_ENV_PATH"]  # kept
    assert knobs_of(new, ONNX) == knobs
    off = apply_knobs(new, ONNX, Knobs())
    assert "dynamic_batching" not in off and "intra_op_thread_count" not in off["parameters"]
    assert knobs_of(off, ONNX) == Knobs()


def test_a_python_step_has_no_thread_knob_and_a_step_without_batching_cannot_batch() -> None:
    assert PY.thread_keys == () and ONNX.thread_keys == ("intra_op_thread_count", "inter_op_thread_count")
    with pytest.raises(BenchError, match="step 'flat' of e.tar.gz: dynamic batching needs max_batch_size > 0"):
        apply_knobs(config("e__flat", max_batch_size=0), FLAT, Knobs(batching=True))


def test_the_grid_is_every_choice_inside_the_cpu_budget() -> None:
    levels = Levels(max_instances=2, delays_us=(0,), threads=(1, 2), cpu_budget=100)
    # encoder: 2 instances x (off, on) x 2 threads = 8; pool: 2 x 2 = 4; flat: 2 instances, no batching
    assert grid_size([ONNX, PY, FLAT], levels) == 8 * 4 * 2
    tight = Levels(max_instances=2, delays_us=(0,), threads=(1, 2), cpu_budget=3)
    assert all(s.cpu_slots() <= 3 for s in grid([ONNX, PY], tight))
    assert grid_size([ONNX, PY], tight) < 8 * 4


def test_levels_refuse_what_triton_would() -> None:
    with pytest.raises(BenchError, match="preferred batch sizes must be 1 or more"):
        Levels(preferred=((0,),))
    with pytest.raises(BenchError, match="give at least one max queue delay"):
        Levels(delays_us=())
    with pytest.raises(BenchError, match="instances, queue delays and thread counts must be positive"):
        Levels(threads=(0,))


def test_weights_even_zipf_given_and_refused() -> None:
    assert weights_of(["a", "b"], None) == {"a": 0.5, "b": 0.5}
    assert weights_of(["a", "b"], "zipf") == pytest.approx({"a": 2 / 3, "b": 1 / 3})
    assert weights_of(["a", "b"], {"a": 3, "b": 0}) == {"a": 1.0}
    with pytest.raises(BenchError, match="--mix names c, which are not tuned here; the TargetModels are a, b"):
        weights_of(["a", "b"], {"c": 1})
    with pytest.raises(BenchError, match="--mix weights must be 0 or more and not all 0"):
        weights_of(["a"], {"a": 0})
    with pytest.raises(BenchError, match="--mix 'pareto': give 'zipf' or NAME=WEIGHT"):
        weights_of(["a"], "pareto")
    with pytest.raises(BenchError, match="nothing to tune: give ensemble files or archives"):
        weights_of([], None)


def test_reload_goes_through_the_repository_extension() -> None:
    assert load_route("e__encoder") == "/v2/repository/models/e__encoder/load"


def _stats(name: str, count: int, queue_ms: float, infer_ms: float, executions: int) -> dict[str, Any]:
    ns = 1_000_000
    return {"name": name, "inference_count": count, "execution_count": executions,
            "inference_stats": {"success": {"count": count, "ns": int(count * (queue_ms + infer_ms) * ns)},
                                "queue": {"count": count, "ns": int(count * queue_ms * ns)},
                                "compute_infer": {"count": count, "ns": int(count * infer_ms * ns)}}}


def test_moves_start_at_the_step_that_waits_and_follow_its_figures() -> None:
    ensemble = {"name": "e.tar.gz", "ensemble_scheduling": {"step": [
        {"model_name": "e__encoder", "input_map": {"x": "X"}, "output_map": {"y": "H"}},
        {"model_name": "e__pool", "input_map": {"x": "H"}, "output_map": {"y": "Y"}}]}}
    after = {"e.tar.gz": _stats("e.tar.gz", 100, 0, 100, 100), "e__encoder": _stats("e__encoder", 100, 60, 30, 100),
             "e__pool": _stats("e__pool", 100, 0, 2, 100)}
    configs = {"e.tar.gz": ensemble, "e__encoder": config("e__encoder"), "e__pool": config("e__pool")}
    profile = assemble(dag_of(ensemble), {}, after, configs, RunInfo("here", "x", 100, 4, 1.0, {}))
    start = Settings({(s.ensemble, s.model): Knobs() for s in (ONNX, PY)})
    found = list(moves(start, [profile], [ONNX, PY], Levels(max_instances=2, delays_us=(0, 500), threads=(1, 2))))
    first = found[0]
    assert first.step == ONNX and first.change == "dynamic batching on (delay 0 us)"
    assert first.why.startswith("queue 67% of its time (60.0 of 90.0 ms)") and "critical" in first.why
    assert found[1].change == "instances 1 -> 2" and found[1].why.endswith("add an instance")
    assert all(m.step == ONNX for m in found[:2]) and any(m.step == PY for m in found)
    # with batching on that merges nothing, the next moves are a longer delay or batching off
    on = start.with_step(ONNX, Knobs(batching=True))
    changes = [m.change for m in moves(on, [profile], [ONNX, PY], Levels(max_instances=2, delays_us=(0, 500)))]
    assert "max queue delay 0 -> 500 us" in changes and "dynamic batching off" in changes


def test_a_trial_beats_another_by_throughput_under_the_target_else_by_p99() -> None:
    def trial(throughput: float, p99: float, under: bool) -> Trial:
        level = Level(1, throughput, p99 / 2, p99, 20, 0)
        return Trial(1, Settings(), (level,), level if under else None, (), 1.0)

    assert trial(106, 50, True).beats(trial(100, 50, True), 0.05)
    assert not trial(104, 50, True).beats(trial(100, 50, True), 0.05)
    assert trial(1, 50, True).beats(trial(100, 900, False), 0.05)  # under the target beats over it
    assert not trial(100, 900, False).beats(trial(1, 50, True), 0.05)
    assert trial(50, 900, False).beats(trial(50, 1000, False), 0.05)  # neither: towards the target
    assert trial(50, 900, False).figure() == "none under the target (p99 900 ms at concurrency 1)"
    assert trial(12.34, 50, True).figure() == "12.3/s"
