"""The MME simulation: LRU per instance, routing to where a model is loaded, ModelLoadingWaitTime."""

from __future__ import annotations

import numpy as np

from conch.plan.simulate import simulate, zipf_trace, zipf_weights


def test_one_instance_is_plain_lru() -> None:
    # room for 2: a b a c b -> miss miss hit miss(evicts b) miss(evicts a)
    result = simulate([0, 1, 0, 2, 1], [1, 1, 1], [2.0, 3.0, 5.0], instances=1, memory=2)
    assert (result.hits, result.loads, result.evictions) == (1, 4, 2)
    assert result.wait_s == 2.0 + 3.0 + 5.0 + 3.0
    assert result.hit_rate == 0.2 and result.loaded_peak == 2


def test_memory_budget_evicts_until_the_new_model_fits() -> None:
    result = simulate([0, 1, 2, 0], [4, 4, 8], [1.0] * 3, instances=1, memory=10)
    assert (result.hits, result.loads, result.evictions) == (0, 4, 3)


def test_a_model_loaded_on_any_instance_is_a_hit_there() -> None:
    # two instances of one slot each: a and b land on different instances and stay loaded
    result = simulate([0, 1] * 10, [1, 1], [1.0, 1.0], instances=2, memory=1)
    assert (result.loads, result.hits, result.evictions) == (2, 18, 0)


def test_warmup_requests_are_not_counted() -> None:
    result = simulate([0, 1, 0, 1], [1, 1], [1.0, 1.0], instances=1, memory=2, warmup=2)
    assert (result.requests, result.hits, result.loads) == (2, 2, 0)


def test_zipf_trace_follows_its_weights() -> None:
    assert np.allclose(zipf_weights(4, 0.0), 0.25)
    trace = zipf_trace(10, 20000, 1.0, seed=1)
    share = np.bincount(trace, minlength=10) / len(trace)
    assert abs(share[0] - zipf_weights(10, 1.0)[0]) < 0.02 and share[0] > share[9] * 5
    assert trace == zipf_trace(10, 20000, 1.0, seed=1)
