"""A DAG of one step is built as that model alone (a single-model archive: no ensemble scheduler hop, server
issue #7080) when callers of the TargetModel cannot tell the difference; otherwise, or when the declaration asks
(keep_ensemble=True), the ensemble is kept, and the build says why."""

from __future__ import annotations

import tarfile
from pathlib import Path

import basic_steps
import numpy as np
import pytest

from conch import DeclarationError, Ensemble, PythonStep, Tensor
from conch.archive.fleet_check import check_archive_models
from conch.builder.repository_build import build_ensemble, render_repository
from conch.compiler.compiled import compile_ensemble
from conch.replays.local_replay import replay_archives
from conch.triton.server import LocalTriton


def doubling(name: str, *, step_input: str = "x", max_batch_size: int = 4, **kw: object) -> Ensemble:
    """x -> double -> y; the ensemble's tensors named as the step's unless ``step_input`` says otherwise."""
    ens = Ensemble(name, max_batch_size=max_batch_size, **kw)  # type: ignore[arg-type]
    step = PythonStep("double", basic_steps.double, inputs=[Tensor(step_input, "FP32", [4])],
                      outputs=[Tensor("y", "FP32", [4])],
                      max_batch_size=max_batch_size)
    ens.output("y", step(ens.input("x", "FP32", [4])))
    data = np.arange(8, dtype=np.float32).reshape(2, 4)
    ens.sample("two rows", {"x": data if max_batch_size else data[0]}, {"y": (data if max_batch_size else data[0]) * 2})
    return ens


def members(archive: Path) -> list[str]:
    with tarfile.open(archive) as tar:
        return sorted(m.name.removeprefix("./") for m in tar.getmembers() if m.name not in (".", "./"))


def test_one_step_is_built_as_the_model_alone_and_replays(tmp_path: Path, triton: LocalTriton) -> None:
    archive = build_ensemble(doubling("alone"), tmp_path, "local")
    assert [m for m in members(archive) if "/" not in m] == ["alone__double", "conch-manifest.json"]
    report = check_archive_models(archive)[0]
    assert report.single == "alone__double" and report.ensemble is None, report.lines()
    replayed = replay_archives([archive], server=triton)
    assert replayed.passed and len(replayed.rows) == 4, replayed.table()


def test_the_build_says_what_a_one_step_dag_became(tmp_path: Path) -> None:
    notes = render_repository(doubling("noted"), "local", "24.10").notes
    assert ("ensemble 'noted' has one step: built as model 'noted__double' alone (a single-model archive, served as "
            "the TargetModel without the ensemble scheduler's hop); Ensemble(..., keep_ensemble=True) keeps the "
            "ensemble") in notes


def test_keep_ensemble_keeps_it(tmp_path: Path) -> None:
    repo = render_repository(doubling("kept", keep_ensemble=True), "production", "24.10")
    assert "kept/config.pbtxt" in repo.files and "kept__double/config.pbtxt" in repo.files
    assert not [n for n in repo.notes if "one step" in n]  # built as before this rule: nothing to say


@pytest.mark.parametrize(("kw", "why"), [
    ({"step_input": "x_in"}, "step 'double' names its tensors differently from the ensemble (input 'x_in' reads "
                             "'x'), and callers of the TargetModel use the ensemble's names"),
    ({"max_batch_size": 0}, None),  # equal batching: alone
])
def test_a_step_callers_could_tell_apart_keeps_its_ensemble(kw: dict[str, object], why: str | None) -> None:
    ensemble = doubling("maybe", **kw)
    repo = render_repository(ensemble, "production", "24.10")
    assert ("maybe/config.pbtxt" in repo.files) == (why is not None)
    assert compile_ensemble(ensemble, "production", "24.10").kept_because() == why


def test_a_batching_mismatch_keeps_the_ensemble() -> None:
    ens = Ensemble("batched", max_batch_size=2)
    step = PythonStep("double", basic_steps.double, inputs=[Tensor("x", "FP32", [4])],
                      outputs=[Tensor("y", "FP32", [4])],
                      max_batch_size=8)
    ens.output("y", step(ens.input("x", "FP32", [4])))
    assert compile_ensemble(ens, "production", "24.10").kept_because() == (
        "step 'double''s max_batch_size 8 differs from the ensemble's 2")


def test_an_output_the_ensemble_drops_keeps_the_ensemble() -> None:
    ens = Ensemble("dropping", max_batch_size=0)
    step = PythonStep("split", basic_steps.split_sum, inputs=[Tensor("a", "FP32", [4]), Tensor("b", "FP32", [4])],
                      outputs=[Tensor("s", "FP32", [4]), Tensor("d", "FP32", [4])])
    s, d = step(a=ens.input("a", "FP32", [4]), b=ens.input("b", "FP32", [4]))
    ens.output("s", s)
    ens.discard(d)
    assert compile_ensemble(ens, "production", "24.10").kept_because() == (
        "step 'split' also returns d, which the ensemble does not; alone it would answer with them")


def test_keep_ensemble_must_be_a_bool() -> None:
    with pytest.raises(DeclarationError, match="ensemble 'e': keep_ensemble must be True or False, got 'yes'"):
        Ensemble("e", keep_ensemble="yes")  # type: ignore[arg-type]
