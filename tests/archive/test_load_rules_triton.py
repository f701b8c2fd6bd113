"""The verdicts recorded in load_rule_cases.py, confirmed on the real tritonserver 2.51: every case loaded in one
server (about 20 s here, so with -m slow), and a few in the default run, so that a change of Triton's words or
verdicts shows up."""

from __future__ import annotations

from pathlib import Path

import pytest
from load_rule_cases import Case, cases
from triton_verdicts import triton_verdicts

CASES = cases()
# one of each kind: a load, a config refused at poll, a step's own config, a missing version, a wiring mismatch
QUICK = ("non_batching_step_in_batching_ensemble", "optimization_on_ensemble", "platform_without_backend",
         "step_asks_missing_version", "dtype_mismatch")


def confirm(chosen: list[Case], tmp_path: Path) -> None:
    root = tmp_path / "repositories"
    verdicts = triton_verdicts([(c.write(root), c.served) for c in chosen], tmp_path / "server")
    wrong = {}
    for case in chosen:
        said = verdicts[case.served].replace(str(root), "ROOT")
        if said != case.triton:
            wrong[case.id] = (case.triton, said)
    assert not wrong, wrong


def test_a_few_verdicts_hold_on_tritonserver(tmp_path: Path) -> None:
    confirm([c for c in CASES if c.id in QUICK], tmp_path)


@pytest.mark.slow
def test_every_verdict_holds_on_tritonserver(tmp_path: Path) -> None:
    confirm(CASES, tmp_path)
