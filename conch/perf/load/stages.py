"""Load stages as seed 003 writes them: each stage runs until ``duration`` seconds from the start (cumulative,
as in Locust's ``StagesShape`` recipe) with ``users`` users, spawned at ``spawn_rate`` per second."""

from __future__ import annotations

import bisect
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from conch.errors import BenchError


@dataclass(frozen=True)
class Stage:
    duration: float  # seconds from the start of the test at which this stage ends
    users: int
    spawn_rate: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def seed_ramp(max_users: int = 200, *, warmup_users: int = 10, step: int = 20, hold: float = 30.0,
              spawn_rate: float = 2.0) -> list[Stage]:
    """Seed 003's shape: warm up with 10 users for 30 s, then +2 users/s to 20, hold, to 40, ... to ``max_users``."""
    stages = [Stage(hold, warmup_users, 5.0)]
    users = step
    while users <= max_users:
        stages.append(Stage(stages[-1].duration + hold, users, spawn_rate))
        users += step
    if stages[-1].users != max_users and max_users > warmup_users:
        stages.append(Stage(stages[-1].duration + hold, max_users, spawn_rate))
    return stages


# Named shapes; the short ones keep tests and first tries to seconds.
PRESETS: dict[str, list[Stage]] = {
    "seed": seed_ramp(),
    "quick": [Stage(10, 2, 2), Stage(20, 4, 2), Stage(30, 8, 4), Stage(40, 16, 8)],
    "test": [Stage(3, 1, 1), Stage(6, 2, 2), Stage(9, 4, 4)],
}


def parse_stages(text: str) -> list[Stage]:
    """A preset name, a JSON list like the seed's (``[{"duration": 30, "users": 10, "spawn_rate": 5}, ...]``),
    or the path of a file holding one."""
    if text in PRESETS:
        return list(PRESETS[text])
    path = Path(text)
    source = path.read_text() if not text.lstrip().startswith("[") and path.is_file() else text
    try:
        raw = json.loads(source)
    except ValueError:
        raise BenchError(
            f"--stages {text!r}: not a preset ({', '.join(PRESETS)}), a JSON list of stages or a file holding one"
        ) from None
    return check_stages(raw)


def check_stages(raw: Any) -> list[Stage]:
    if not isinstance(raw, list) or not raw:
        raise BenchError("stages: expected a non-empty JSON list of {duration, users, spawn_rate}")
    stages: list[Stage] = []
    for i, item in enumerate(raw):
        if not isinstance(item, Mapping) or not {"duration", "users"} <= set(item):
            raise BenchError(f"stage {i + 1}: expected keys duration, users (and spawn_rate), got {item!r}")
        stage = Stage(float(item["duration"]), int(item["users"]), float(item.get("spawn_rate", item["users"])))
        previous = stages[-1].duration if stages else 0.0
        if stage.duration <= previous:
            raise BenchError(
                f"stage {i + 1}: duration {stage.duration:g} must be later than {previous:g} (durations count from "
                "the start of the test, as in seed 003's list)"
            )
        if stage.users < 1 or stage.spawn_rate <= 0:
            raise BenchError(f"stage {i + 1}: needs at least one user and a positive spawn_rate, got {item!r}")
        stages.append(stage)
    return stages


def stage_index(stages: Sequence[Stage], elapsed: float) -> int | None:
    """Index of the stage running ``elapsed`` seconds after the start (None once the last has ended)."""
    index = bisect.bisect_right([stage.duration for stage in stages], elapsed)
    return index if index < len(stages) else None


def stage_start(stages: Sequence[Stage], index: int) -> float:
    return 0.0 if index == 0 else stages[index - 1].duration
