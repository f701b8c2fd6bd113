"""Compile once: a declaration compiled for a target holds every step's model name, checked layout,
environment and wiring; a build validates, lays out and checks each step once, and its in-process run
takes the same plan."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from conftest import linear_ensemble

from conch import DeclarationError, Ensemble, PythonEnv, PythonStep, Release, Target
from conch.builder.repository_build import render_repository
from conch.compiler.compiled import compile_ensemble
from conch.ensembles.layout import Platform, StepLayout
from conch.executor import Executor


def test_a_compiled_plan_holds_each_step_as_the_target_lays_it_out() -> None:
    ens = linear_ensemble("plan", max_batch_size=4)
    ens.env = PythonEnv(requirements=["numpy"])
    plan = compile_ensemble(ens, "production", "24.10")
    assert (plan.name, plan.target, plan.release, plan.max_batch_size) == ("plan", Target.PRODUCTION,
                                                                          Release.of("24.10"), 4)
    assert [s.model_name for s in plan.steps] == ["plan__double", "plan__add_one"]
    assert [s.served_as for s in plan.steps] == ["python", "python"]
    assert all(s.env is ens.env and s.python_in_production for s in plan.steps)
    assert [(s.inputs, s.outputs) for s in plan.steps] == [
        ((("x", "X"),), (("y", "double.y"),)), ((("y", "double.y"),), (("z", "Z"),))]
    assert plan.spec == ens.spec() and plan.spec.served_by is Platform.ENSEMBLE
    assert [(t.name, t.dtype.wire, t.dims) for t in (*plan.inputs, *plan.outputs)] == [
        ("X", "FP32", (4,)), ("Z", "FP32", (4,))]
    assert plan.steps[0].summary() == {
        "name": "double", "kind": "python", "max_batch_size": 4,
        "inputs": [{"name": "x", "datatype": "FP32", "dims": [4]}],
        "outputs": [{"name": "y", "datatype": "FP32", "dims": [4]}],
    }  # a Python step's backend adds nothing under its kind
    local = plan.local()
    assert local.target is Target.LOCAL and local.local() is local
    assert [s.served_as for s in local.steps] == ["python", "python"] and local.steps[0].env is ens.env


def test_compiling_refuses_an_invalid_declaration_before_any_step_is_laid_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ens = Ensemble("unwired")
    laid_out: list[str] = []
    monkeypatch.setattr(PythonStep, "layout", lambda step, *args: laid_out.append(step.name))
    with pytest.raises(DeclarationError, match="ensemble 'unwired': has no steps; call a step"):
        compile_ensemble(ens, "local", "24.10")
    assert laid_out == []


def test_a_local_build_validates_lays_out_and_checks_each_step_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The in-process run that derives the warmup takes the build's own plan: nothing is laid out twice."""
    ens = linear_ensemble("once", max_batch_size=4)
    ens.warmup("two rows")
    validated, laid_out, checked = Counter[str](), Counter[str](), Counter[str]()
    validate, layout, check = Ensemble.validate, PythonStep.layout, PythonStep.check

    def counted_validate(self: Ensemble) -> None:
        validated[self.name] += 1
        validate(self)

    def counted_layout(self: PythonStep, model: str, target: Target, release: Release, ensemble: str) -> StepLayout:
        laid_out[model] += 1
        return layout(self, model, target, release, ensemble)

    def counted_check(self: PythonStep, release: Release) -> None:
        checked[self.name] += 1
        check(self, release)

    monkeypatch.setattr(Ensemble, "validate", counted_validate)
    monkeypatch.setattr(PythonStep, "layout", counted_layout)
    monkeypatch.setattr(PythonStep, "check", counted_check)
    repo = render_repository(ens, "local", "24.10", refresh=True)
    assert repo.manifest["warmup"]["source"] == "sample 'two rows'"  # the ensemble ran in this process
    assert validated == {"once": 1}
    assert laid_out == {"once__double": 1, "once__add_one": 1}
    assert set(checked.values()) <= {1}


def test_an_executor_runs_a_compiled_plan_and_a_production_plan_through_its_local_one() -> None:
    ens = linear_ensemble("runs", max_batch_size=4)
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    for plan in (compile_ensemble(ens, "local", "24.10"), compile_ensemble(ens, "production", "24.10")):
        with Executor(plan) as executor:
            assert executor.plan.target is Target.LOCAL
            np.testing.assert_array_equal(executor.run({"X": x})["Z"], x * 2 + 1)
