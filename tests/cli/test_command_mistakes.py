"""Mistakes on the command line of bench, plan, serve and invoke: each is one `conch: error:` line that
names what is wrong and what to give instead, exit code 2, no traceback, and nothing started."""

from __future__ import annotations

import json
from pathlib import Path

import basic_steps
import pytest
from conftest import REFUSED_URL
from test_cli import conch
from test_cli_errors import assert_one_line_each

from conch import Ensemble, PythonStep, Tensor
from conch.builder.repository_build import build_ensemble
from conch.errors import BenchError
from conch.perf.load.spec import archive_targets

NOWHERE = REFUSED_URL  # nothing listens there: a command that got that far would fail differently
AWS = ("--endpoint", "prod", "--region", "us-east-1", "--endpoint-url", NOWHERE)
PLAN = ("plan", "--ensembles", "3", "--rps", "10")


def fails_with(*args: str) -> str:
    result = conch(*args)
    assert result.returncode == 2, (result.stdout, result.stderr)
    return result.stderr


@pytest.fixture
def bad_json(tmp_path: Path) -> Path:
    path = tmp_path / "bad.json"
    path.write_text('{"not": "what was asked for"}')
    return path


def test_bench_without_archives(tmp_path: Path) -> None:
    stderr = fails_with("bench", "--endpoint-url", NOWHERE)
    assert_one_line_each(stderr, ["give the archives to send requests to (.tar.gz files or folders of them)"])


def test_bench_of_a_folder_without_archives(tmp_path: Path) -> None:
    stderr = fails_with("bench", str(tmp_path), "--endpoint-url", NOWHERE)
    assert_one_line_each(stderr, [f"{tmp_path} holds no .tar.gz archives: run `conch build --out {tmp_path}` first"])


def test_load_targets_of_no_archives() -> None:
    with pytest.raises(BenchError, match=r"no archives to send requests to: give built \.tar\.gz files or a folder"):
        archive_targets([])


def test_bench_of_an_archive_without_samples(tmp_path: Path) -> None:
    ens = Ensemble("no_samples", max_batch_size=4)
    step = PythonStep("double", basic_steps.double, inputs=[Tensor("x", "FP32", [4])],
                      outputs=[Tensor("y", "FP32", [4])],
                      max_batch_size=4)
    ens.output("Y", step(ens.input("X", "FP32", [4])))
    archive = build_ensemble(ens, tmp_path, "local")
    stderr = fails_with("bench", str(archive), "--endpoint-url", NOWHERE)
    assert_one_line_each(stderr, ["no_samples.tar.gz has no sample payloads to send; declare one with "
                                  "ensemble.sample(...)"])


def test_probe_without_a_memory_budget(tmp_path: Path) -> None:
    stderr = fails_with("bench", "--probe", str(tmp_path / "x.tar.gz"))
    assert_one_line_each(stderr, ["the probe fills a memory budget: give --memory-budget, e.g. 8GiB"])


def test_probe_with_a_threshold_that_is_not_a_share(tmp_path: Path) -> None:
    stderr = fails_with("bench", "--probe", str(tmp_path / "x.tar.gz"), "--memory-budget", "1GiB",
                        "--threshold", "90")
    assert_one_line_each(stderr, ["threshold 90.0: give a share of the budget between 0 and 1, e.g. 0.9"])


def test_plan_with_a_file_that_is_not_a_probe(tmp_path: Path, bad_json: Path) -> None:
    stderr = fails_with(*PLAN, "--probe", str(bad_json))
    assert_one_line_each(stderr, [f"{bad_json}: not a probe JSON written by `conch bench --probe` ('ensemble')"])


def test_plan_with_a_file_that_is_not_a_bench(tmp_path: Path, bad_json: Path) -> None:
    stderr = fails_with(*PLAN, "--memory-per-model", "1GiB", "--bench", str(bad_json))
    assert_one_line_each(stderr, [f"{bad_json}: not a bench JSON written by `conch bench` ('warm')"])


def test_plan_with_instance_data_that_is_not_instance_data(tmp_path: Path, bad_json: Path) -> None:
    stderr = fails_with(*PLAN, "--memory-per-model", "1GiB", "--instances", str(bad_json))
    assert_one_line_each(stderr, [f"instance data {bad_json}: unreadable ('instances'); expected "
                                  '{"date", "source", "instances": [{"type"'])


def test_plan_for_no_ensembles(tmp_path: Path) -> None:
    stderr = fails_with("plan", "--ensembles", "0", "--rps", "10", "--memory-per-model", "1GiB")
    assert_one_line_each(stderr, ["a plan needs at least one ensemble and a positive request rate"])


def test_serve_of_an_archive_that_does_not_exist(tmp_path: Path) -> None:
    stderr = fails_with("serve", str(tmp_path / "missing.tar.gz"))
    assert_one_line_each(stderr, [f"{tmp_path / 'missing.tar.gz'}: no such archive"])


def test_serve_of_a_folder_with_nothing_to_serve(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    stderr = fails_with("serve", str(tmp_path / "empty"))
    assert_one_line_each(stderr, ["nothing to serve: give ensemble files, folders or .tar.gz archives, "
                                  "or --mme SOURCE"])


def test_serve_of_an_s3_source_without_a_bucket(tmp_path: Path) -> None:
    stderr = fails_with("serve", "--mme", "s3:///models/")
    assert_one_line_each(stderr, ["s3:///models/: name a bucket, e.g. s3://my-bucket/models/"])


def test_serve_with_room_for_no_model(tmp_path: Path) -> None:
    stderr = fails_with("serve", "--mme", str(tmp_path), "--max-loaded", "0")
    assert_one_line_each(stderr, ["max_loaded 0: at least one model must fit"])


def test_invoke_with_a_json_body_but_no_target_model(tmp_path: Path) -> None:
    body = tmp_path / "body.json"
    body.write_text(json.dumps({"inputs": []}))
    stderr = fails_with("invoke", *AWS, "--request", str(body))
    assert_one_line_each(stderr, ["--request needs --target-model (the archive's name under the prefix, "
                                  "e.g. x.tar.gz)"])


def test_invoke_with_a_json_file_that_is_not_a_kserve_body(tmp_path: Path, bad_json: Path) -> None:
    stderr = fails_with("invoke", *AWS, "--request", str(bad_json), "--target-model", "x.tar.gz")
    assert_one_line_each(stderr, [f"--request {bad_json}: not a KServe v2 request body (no 'inputs' list); "
                                  'write {"inputs": [...]}'])


def test_invoke_with_an_archive_that_does_not_exist(tmp_path: Path) -> None:
    stderr = fails_with("invoke", *AWS, "--archive", str(tmp_path / "missing.tar.gz"))
    assert_one_line_each(stderr, [f"{tmp_path / 'missing.tar.gz'}: no such archive"])


@pytest.mark.parametrize("flags", [("--copies", "0"), ("--max-users", "0"), ("--workers", "-1"), ("--timeout", "0"),
                                   ("--wait", "-1"), ("--zipf", "-1")])
def test_bench_figures_out_of_range(tmp_path: Path, flags: tuple[str, str]) -> None:
    stderr = fails_with("bench", str(tmp_path / "x.tar.gz"), "--endpoint-url", NOWHERE, *flags)
    assert f"conch: error: out of range: {flags[0]} {flags[1]} (" in stderr
    assert "Traceback" not in stderr
