"""`conch bench` against an endpoint it does not start: `--endpoint-url URL` (any server speaking the SageMaker
runtime API), `--endpoint NAME` (a deployed endpoint, through boto3: here boto3 is pointed at a local MME the
way it is pointed at any endpoint, AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME) and `--no-check` (any HTTP 200 counts)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import basic_steps
import numpy as np
import pytest

from conch import Ensemble, PythonStep, Tensor
from conch.builder.repository_build import build_ensemble
from conch.cli import main
from conch.endpoint import LocalMME

pytestmark = pytest.mark.integration

STAGES = '[{"duration": 3, "users": 1, "spawn_rate": 1}]'
NAME = "bench_target"


def linear(expect_scale: float) -> Ensemble:
    """X -> double -> add_one -> Z, its one sample expecting Z = X * expect_scale + 1 (right when 2)."""
    ens = Ensemble(NAME, max_batch_size=8)
    x = ens.input("X", "FP32", [4])
    dbl = PythonStep("double", basic_steps.double, inputs=[Tensor("x", "FP32", [4])],
                     outputs=[Tensor("y", "FP32", [4])],
                     max_batch_size=8)
    add = PythonStep("add_one", basic_steps.add_one, inputs=[Tensor("y", "FP32", [4])],
                     outputs=[Tensor("z", "FP32", [4])],
                     max_batch_size=8)
    ens.output("Z", add(dbl(x)))
    data = np.arange(8, dtype=np.float32).reshape(2, 4)
    ens.sample("two rows", {"X": data}, {"Z": data * expect_scale + 1})
    return ens


@pytest.fixture(scope="module")
def archives(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The served archive, and one of the same name whose sample expects a wrong answer."""
    root = tmp_path_factory.mktemp("bench-targets")
    return {"right": build_ensemble(linear(2), root / "right", "local"),
            "wrong": build_ensemble(linear(3), root / "wrong", "local")}


@pytest.fixture(scope="module")
def mme(archives: dict[str, Path]) -> Iterator[LocalMME]:
    with LocalMME(archives["right"].parent, max_loaded=2) as endpoint:
        yield endpoint


def bench(out: Path, *args: str, exit_code: int = 0) -> dict[str, Any]:
    assert main(["bench", *args, "--stages", STAGES, "--out", str(out)]) == exit_code
    summary: dict[str, Any] = json.loads((out / "bench.json").read_text())
    assert summary["requests"] >= 1 and summary["per_target"][f"{NAME}.tar.gz"]["requests"] == summary["requests"]
    return summary


def test_bench_endpoint_url_checks_every_answer(archives: dict[str, Path], mme: LocalMME, tmp_path: Path) -> None:
    good = bench(tmp_path / "good", str(archives["right"]), "--endpoint-url", mme.url)
    assert good["target"] == {"kind": "sagemaker", "url": mme.url, "endpoint": "local"}
    assert good["failures"] == 0, good["errors"]
    # the same server, an archive expecting other numbers: every answer is a wrong answer
    bad = bench(tmp_path / "bad", str(archives["wrong"]), "--endpoint-url", mme.url, exit_code=1)  # a failed run
    assert bad["failures"] == bad["requests"] and all(e.startswith("wrong answer: Z") for e in bad["errors"])


def test_bench_endpoint_name_goes_through_boto3_and_no_check_counts_any_200(
        archives: dict[str, Path], mme: LocalMME, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME", mme.url)
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(key, "local")  # the local MME takes any credentials, as boto3 insists on some
    summary = bench(tmp_path, str(archives["wrong"]), "--endpoint", "local", "--region", "us-east-1", "--no-check")
    assert summary["target"] == {"kind": "boto3", "url": None, "endpoint": "local"}
    assert summary["failures"] == 0, summary["errors"]
