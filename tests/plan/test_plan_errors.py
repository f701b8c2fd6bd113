"""A plan asked for without what it needs says what to give."""

from __future__ import annotations

import pytest

from conch.errors import BenchError
from conch.plan.fleet import Targets, Traffic, plan
from conch.plan.instances import load_instances


def test_a_plan_without_any_ensemble_profile_says_where_profiles_come_from() -> None:
    types = load_instances().types
    with pytest.raises(BenchError, match=r"a plan needs at least one ensemble profile \(a probe JSON, or "
                                         r"--memory-per-model\)"):
        plan([], 10, Traffic(rps=5.0), Targets(), types)
