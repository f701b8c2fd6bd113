"""The tune's space: knobs read from and written into Triton's config JSON, the grid inside the CPU budget, the
traffic mix, and the moves the figures point to (from a profile assembled out of statistics snapshots)."""

from __future__ import annotations

from typing import Any

import pytest

from conch.errors import BenchError
from conch.perf.profile.dag import dag_of
from conch.perf.profile.profile_report import Profile, RunInfo, assemble
from conch.perf.tune.search import Round, better, close_margin, final_moves, fit_threads, moves
from conch.perf.tune.space import Knobs, Levels, Settings, StepSpace, apply_knobs, grid, grid_size, knobs_of
from conch.perf.tune.trial import Level, Trial, load_route, weights_of

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
    with pytest.raises(BenchError, match="instances, cores, queue delays and thread counts must be positive"):
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


CHAIN = {"name": "e.tar.gz", "ensemble_scheduling": {"step": [
    {"model_name": "e__encoder", "input_map": {"x": "X"}, "output_map": {"y": "H"}},
    {"model_name": "e__pool", "input_map": {"x": "H"}, "output_map": {"y": "Y"}}]}}


def _profile(encoder: tuple[float, float], pool: tuple[float, float]) -> Profile:
    """A profile of X -> encoder -> pool -> Y from statistics snapshots: (queue ms, infer ms) per step."""
    after = {"e.tar.gz": _stats("e.tar.gz", 100, 0, 100, 100), "e__encoder": _stats("e__encoder", 100, *encoder, 100),
             "e__pool": _stats("e__pool", 100, *pool, 100)}
    configs = {"e.tar.gz": CHAIN, "e__encoder": config("e__encoder"), "e__pool": config("e__pool")}
    return assemble(dag_of(CHAIN), {}, after, configs, RunInfo("here", "x", 100, 4, 1.0, {}))


START = Settings({(s.ensemble, s.model): Knobs() for s in (ONNX, PY)})
TWO_CORES = Levels(max_instances=2, delays_us=(0, 500), threads=(1, 2), cpu_cores=2)


def test_moves_start_at_the_step_that_waits_with_the_combined_move_then_each_half() -> None:
    profile = _profile((60, 30), (0, 2))
    found = list(moves(START, [profile], [ONNX, PY], TWO_CORES))
    first = found[0]
    # short of instances: an instance more, batching on, and the threads per instance cut to fit 2 cores, at once
    assert first.step == ONNX and first.tier == 0
    assert first.change == "instances 1 -> 2, intra_op_thread_count default -> 1, dynamic batching on (delay 0 us)"
    assert first.settings.of(ONNX) == Knobs(2, True, 0, (), (("intra_op_thread_count", 1),))
    assert first.why.startswith("queue 67% of its time (60.0 of 90.0 ms)") and "critical" in first.why
    assert first.why.endswith("(2 cores: instances x threads fit them)")
    # then each half alone (the instance still with its threads fitted), then one thread at one instance
    assert [m.change for m in found[1:4]] == ["instances 1 -> 2, intra_op_thread_count default -> 1",
                                              "dynamic batching on (delay 0 us)", "intra_op_thread_count default -> 1"]
    assert all(m.step == ONNX for m in found[:4]) and any(m.step == PY for m in found)
    assert [m.tier for m in found] == sorted(m.tier for m in found)
    # with batching on that merges nothing, the next moves are a longer delay or batching off
    on = START.with_step(ONNX, Knobs(batching=True))
    changes = [m.change for m in moves(on, [profile], [ONNX, PY], Levels(max_instances=2, delays_us=(0, 500)))]
    assert "max queue delay 0 -> 500 us" in changes and "dynamic batching off" in changes


def test_a_critical_step_holding_most_of_end_to_end_is_short_of_instances_without_a_queue() -> None:
    # the trial's best level may be one request at a time (the next added nothing): no queue, 90% of end to end
    found = list(moves(START, [_profile((0, 90), (0, 4))], [ONNX, PY], TWO_CORES))
    assert found[0].change == "instances 1 -> 2, intra_op_thread_count default -> 1, dynamic batching on (delay 0 us)"
    assert found[0].why.startswith("90% of end to end, critical, queue 0% of its time at the best level: it holds "
                                   "most of each request: more instances")
    assert found[0].tier == 0
    # the pool, critical but 4 % of end to end, gets an instance more (second tier), not the combined move
    pool = [m for m in found if m.step == PY]
    assert pool[0].change == "instances 1 -> 2" and pool[0].tier == 1
    assert pool[0].why == "4% of end to end, critical: another instance runs requests side by side"


def test_every_step_first_move_comes_before_any_step_second_one() -> None:
    profile = _profile((60, 30), (30, 20))  # both wait; the encoder holds more time
    found = list(moves(START, [profile], [ONNX, PY], TWO_CORES))
    assert [(m.step.step, m.tier) for m in found[:2]] == [("encoder", 0), ("pool", 0)]
    assert found[1].change == "instances 1 -> 2, dynamic batching on (delay 0 us)"  # a Python step has no threads
    assert found[2].step == ONNX and found[2].tier == 1


def test_threads_fit_the_cores_when_instances_grow() -> None:
    levels = Levels(max_instances=4, threads=(1, 2), cpu_cores=4)
    assert fit_threads(Knobs(instances=2), ONNX, levels).thread("intra_op_thread_count") == 2  # default: 4 cores
    assert fit_threads(Knobs(instances=4), ONNX, levels).thread("intra_op_thread_count") == 1
    fitting = Knobs(instances=2, threads=(("intra_op_thread_count", 2),))
    assert fit_threads(fitting, ONNX, levels) == fitting  # 2 x 2 fit 4 cores: unchanged
    assert fit_threads(Knobs(instances=1), ONNX, levels) == Knobs(instances=1)  # the default fits one instance
    only_two = Levels(max_instances=4, threads=(2,), cpu_cores=2)
    assert fit_threads(Knobs(instances=2), ONNX, only_two).thread("intra_op_thread_count") == 2  # none fits: least
    assert fit_threads(Knobs(instances=2), PY, levels) == Knobs(instances=2)  # no thread knob
    # 2 instances with the default threads on 2 cores: the first move is to fit them
    two = START.with_step(ONNX, Knobs(instances=2, batching=True))
    first = next(moves(two, [_profile((10, 30), (0, 2))], [ONNX, PY], TWO_CORES))
    assert first.change == "intra_op_thread_count default -> 1" and first.tier == 0
    assert first.why == "2 instances each with the default (every core) threads: instances x threads fit the 2 cores"


def test_the_last_tries_are_the_limiting_step_combined_move_and_the_top_two_steps_an_instance_more() -> None:
    profile = _profile((60, 30), (0, 20))
    on = START.with_step(ONNX, Knobs(batching=True, threads=(("intra_op_thread_count", 1),)))
    combined, both = final_moves(on, [profile], [ONNX, PY], TWO_CORES)
    assert combined.final and combined.step == ONNX and combined.change == "instances 1 -> 2"  # batching stays on
    assert combined.settings.of(ONNX) == Knobs(2, True, 0, (), (("intra_op_thread_count", 1),))
    assert combined.why.startswith("the last try before stopping: the step that limits the critical path")
    assert both.change == "encoder instances 1 -> 2 and pool instances 1 -> 2"
    assert both.settings.of(ONNX).instances == 2 and both.settings.of(PY).instances == 2
    fresh = final_moves(START, [profile], [ONNX, PY], TWO_CORES)[0]
    assert fresh.change == "instances 1 -> 2, intra_op_thread_count default -> 1, dynamic batching on (delay 0 us)"
    at_most = START.with_step(ONNX, Knobs(instances=2)).with_step(PY, Knobs(instances=2))
    assert final_moves(at_most, [profile], [ONNX, PY], TWO_CORES) == []  # nothing left to grow
    tight = Levels(max_instances=2, delays_us=(0,), threads=(1, 2), cpu_budget=3, cpu_cores=2)
    one_at_a_time = final_moves(on, [profile], [ONNX, PY], tight)  # both at once: 4 slots, past the budget of 3
    assert [(m.step.step, m.change) for m in one_at_a_time] == [("encoder", "instances 1 -> 2"),
                                                                ("pool", "instances 1 -> 2")]
    assert one_at_a_time[1].why.endswith("an instance more (both at once pass the CPU budget)")


def _trial(number: int, throughput: float, p99: float = 50, under: bool = True) -> Trial:
    level = Level(1, throughput, p99 / 2, p99, 20, 0)
    return Trial(number, START, (level,), level if under else None, (), 1.0)


def test_a_close_call_is_judged_on_the_means_of_two_measurements_each() -> None:
    move = next(moves(START, [_profile((60, 30), (0, 2))], [ONNX, PY], TWO_CORES))
    assert close_margin(0.05) == 0.05 / 2 ** 0.5 and close_margin(0.0) == 0.025 and close_margin(0.2) > 0.14
    kept = Round(2, move, (_trial(2, 44), _trial(4, 46)), (_trial(1, 40), _trial(3, 41)), 0.05, True, "close")
    assert kept.verdict() == ("kept: a close call, measured again (A/B/A/B): the candidate 44.0/s and 46.0/s (mean "
                              "45.0/s) against the current settings 40.0/s and 41.0/s (mean 40.5/s), a margin of 4% "
                              "for means of two (the run's noise so far 5% over the square root of 2, at least 2%)")
    doc = kept.to_json()
    assert doc["candidate_per_s"] == [44, 46] and doc["current_per_s"] == [40, 41] and doc["again_per_s"] == 41
    assert doc["decided"] == "close" and doc["trials"] == [2, 4] and doc["margin"] == round(0.05 / 2 ** 0.5, 4)
    clear = Round(1, move, (_trial(2, 60),), (_trial(1, 40), _trial(3, 41)), 0.05, True, "clear")
    assert clear.verdict() == ("kept: 60.0/s beats the current settings' 40.0/s and 41.0/s (mean 40.5/s) by more "
                               "than the run's noise so far (5%, at least 5%)")
    below = Round(1, move, (_trial(2, 30),), (_trial(1, 40),), 0.05, False, "below")
    assert below.verdict() == ("dropped: 30.0/s does not beat the current settings' 40.0/s (the run's noise so far "
                               "5%, at least 5%)") and below.to_json()["again_per_s"] is None
    spent = Round(1, move, (_trial(2, 42),), (_trial(1, 40), _trial(3, 41)), 0.05, False, "budget")
    assert spent.verdict().endswith("and no trial of the budget was left to measure it again")


def test_a_trial_beats_another_by_throughput_under_the_target_else_by_p99() -> None:
    def trial(throughput: float, p99: float, under: bool) -> Trial:
        return _trial(1, throughput, p99, under)

    def beats(a: Trial, b: Trial, margin: float) -> bool:
        return better((a,), (b,), margin)

    assert beats(trial(106, 50, True), trial(100, 50, True), 0.05)
    assert not beats(trial(104, 50, True), trial(100, 50, True), 0.05)
    assert beats(trial(1, 50, True), trial(100, 900, False), 0.05)  # under the target beats over it
    assert not beats(trial(100, 900, False), trial(1, 50, True), 0.05)
    assert beats(trial(50, 900, False), trial(50, 1000, False), 0.05)  # neither: towards the target
    assert trial(50, 900, False).figure() == "none under the target (p99 900 ms at concurrency 1)"
    assert trial(12.34, 50, True).figure() == "12.3/s"
