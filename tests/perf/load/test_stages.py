"""Stages: seed 003's ramp, presets, and the JSON users write."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from conch.errors import BenchError
from conch.perf.load.stages import PRESETS, Stage, parse_stages, seed_ramp, stage_index


def test_seed_ramp_warms_up_with_ten_users_then_climbs_by_twenty_to_the_maximum() -> None:
    stages = seed_ramp()
    assert stages[0] == Stage(30, 10, 5)
    assert [s.users for s in stages] == [10, *range(20, 201, 20)]
    assert all(b.duration - a.duration == 30 for a, b in itertools.pairwise(stages))
    assert all(s.spawn_rate == 2 for s in stages[1:])
    assert seed_ramp(50)[-1].users == 50


def test_seed_list_parses_with_cumulative_durations(tmp_path: Path) -> None:
    seed = [{"duration": 30, "users": 10, "spawn_rate": 5}, {"duration": 60, "users": 20, "spawn_rate": 1}]
    assert parse_stages(json.dumps(seed)) == [Stage(30, 10, 5), Stage(60, 20, 1)]
    (tmp_path / "stages.json").write_text(json.dumps(seed))
    assert parse_stages(str(tmp_path / "stages.json")) == parse_stages(json.dumps(seed))
    # the presets by their numbers (a preset is what users pick by name: a changed one must show up here)
    assert parse_stages("test") == [Stage(3, 1, 1), Stage(6, 2, 2), Stage(9, 4, 4)]
    assert parse_stages("quick") == [Stage(10, 2, 2), Stage(20, 4, 2), Stage(30, 8, 4), Stage(40, 16, 8)]
    assert parse_stages("seed") == seed_ramp() and sorted(PRESETS) == ["quick", "seed", "test"]


@pytest.mark.parametrize("text, words", [
    ("nonsense", "not a preset"),
    ("[]", "non-empty"),
    ('[{"users": 3}]', "duration"),
    ('[{"duration": 10, "users": 1}, {"duration": 5, "users": 2}]', "later than 10"),
    ('[{"duration": 10, "users": 0}]', "at least one user"),
])
def test_bad_stages_say_what_is_wrong(text: str, words: str) -> None:
    with pytest.raises(BenchError, match=words):
        parse_stages(text)


def test_stage_index_follows_the_clock() -> None:
    stages = PRESETS["test"]
    assert [stage_index(stages, t) for t in (0, 2.9, 3, 8.9, 9)] == [0, 0, 1, 2, None]
