"""Mistakes on the command line of bench, plan, invoke, serve and profile, run in-process: each ends in one
`conch: error:` line that names what is wrong and what to give instead, exit code 2, before anything starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import REFUSED_URL

from conch.cli import main

NOWHERE = REFUSED_URL  # nothing listens there: a command that got that far would fail differently
PLAN = ["plan", "--ensembles", "3", "--rps", "10"]
GIVEN = ["--memory-per-model", "1GiB", "--load-seconds", "2"]


def error_of(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """The `conch: error:` line of a command that must refuse (exit code 2, no traceback)."""
    code = main(list(argv))
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("conch: error:")]
    assert len(lines) == 1, err
    return lines[0]


@pytest.fixture
def not_json(tmp_path: Path) -> Path:
    path = tmp_path / "bad.json"
    path.write_text("{not json")
    return path


def test_bench_without_archives_says_what_to_give(capsys: pytest.CaptureFixture[str]) -> None:
    line = error_of(capsys, "bench", "--endpoint-url", NOWHERE)
    assert "give the archives to send requests to (.tar.gz files or folders of them)" in line


def test_bench_probe_without_a_memory_budget(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = error_of(capsys, "bench", "--probe", str(tmp_path / "x.tar.gz"))
    assert "the probe fills a memory budget: give --memory-budget, e.g. 8GiB" in line


def test_bench_probe_threshold_outside_zero_to_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = error_of(capsys, "bench", "--probe", str(tmp_path / "x.tar.gz"), "--memory-budget", "1GiB",
                    "--threshold", "1.5")
    assert "threshold 1.5: give a share of the budget between 0 and 1, e.g. 0.9" in line


def test_plan_without_any_cost_lists_the_three_ways(capsys: pytest.CaptureFixture[str]) -> None:
    line = error_of(capsys, *PLAN)
    assert ("give each ensemble's cost: --probe PROBE.json (from `conch bench --probe`), --measure ARCHIVE "
            "(probed here), or --memory-per-model SIZE with --load-seconds S") in line


def test_plan_of_a_probe_json_that_is_not_one(not_json: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = error_of(capsys, *PLAN, "--probe", str(not_json))
    assert f"{not_json}: not a probe JSON written by `conch bench --probe` (" in line


def test_plan_of_a_probe_json_missing_a_figure(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    probe = tmp_path / "probe.json"
    probe.write_text(json.dumps({"ensemble": "a", "load_s_mean": 1.0}))
    line = error_of(capsys, *PLAN, "--probe", str(probe))
    assert f"{probe}: not a probe JSON written by `conch bench --probe` ('memory_per_copy_bytes')" in line


def test_plan_of_a_bench_json_that_is_not_one(not_json: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = error_of(capsys, *PLAN, *GIVEN, "--bench", str(not_json))
    assert f"{not_json}: not a bench JSON written by `conch bench` (" in line


def test_plan_of_a_bench_json_without_warm_figures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({"per_stage": []}))
    line = error_of(capsys, *PLAN, *GIVEN, "--bench", str(bench))
    assert f"{bench}: not a bench JSON written by `conch bench` ('warm')" in line


@pytest.mark.parametrize("figures", [["--ensembles", "0", "--rps", "10"], ["--ensembles", "3", "--rps", "0"]])
def test_plan_of_no_ensembles_or_no_traffic(figures: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    line = error_of(capsys, "plan", *figures, *GIVEN)
    assert "a plan needs at least one ensemble and a positive request rate" in line


def test_plan_lists_every_figure_out_of_range(capsys: pytest.CaptureFixture[str]) -> None:
    line = error_of(capsys, *PLAN, *GIVEN, "--zipf", "-1", "--miss-rate", "2")
    assert ("a plan cannot use these figures: --miss-rate 2 is not in [0, 1]; --zipf -1 is negative (0: uniform)"
            in line)


def test_plan_of_an_unknown_instance_type_lists_the_known_ones(capsys: pytest.CaptureFixture[str]) -> None:
    line = error_of(capsys, *PLAN, *GIVEN, "--instance-type", "ml.nope.large")
    assert "instance type 'ml.nope.large' is not in the instance data (" in line
    assert "); known: ml." in line


def test_plan_of_unreadable_instance_data_shows_the_expected_shape(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "instances.json"
    data.write_text(json.dumps({"date": "2026-01-01", "source": "here", "instances": [{"type": "ml.x"}]}))
    line = error_of(capsys, *PLAN, *GIVEN, "--instances", str(data))
    assert (f"instance data {data}: unreadable ('vcpu'); expected "
            '{"date", "source", "instances": [{"type", "vcpu", "memory_gib", "gpu_memory_gib", "price_per_hour"}, ...]}'
            ) in line


def test_invoke_of_a_request_without_a_target_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"inputs": []}))
    line = error_of(capsys, "invoke", "--endpoint", "prod", "--region", "us-east-1", "--endpoint-url", NOWHERE,
                    "--request", str(request))
    assert "--request needs --target-model (the archive's name under the prefix, e.g. x.tar.gz)" in line


def test_serve_of_a_folder_with_nothing_to_serve(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    line = error_of(capsys, "serve", str(empty), "--port", "0")
    assert "nothing to serve: give ensemble files, folders or .tar.gz archives, or --mme SOURCE" in line


def test_serve_of_an_s3_source_without_a_bucket(capsys: pytest.CaptureFixture[str]) -> None:
    line = error_of(capsys, "serve", "--mme", "s3:///models/", "--port", "0")
    assert "s3:///models/: name a bucket, e.g. s3://my-bucket/models/" in line


def test_profile_with_url_of_something_not_an_archive(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "ensemble.py"
    script.write_text("x = 1\n")
    line = error_of(capsys, "profile", "--url", NOWHERE, str(script))
    assert f"{script}: with --url give archives (their samples are sent) or --payload (" in line


def test_profile_of_a_folder_with_nothing_to_profile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    line = error_of(capsys, "profile", str(empty))
    assert "nothing to profile: give ensemble files, folders or .tar.gz archives" in line


def test_a_server_that_does_not_answer_is_one_line_naming_the_address(capsys: pytest.CaptureFixture[str]) -> None:
    """A connection that fails under a command (a tritonserver that died mid-run, a URL where nothing listens) is
    the address and what to check, not a conch bug."""
    import argparse

    import httpx

    from conch.cli import _run

    def talks(_: argparse.Namespace) -> int:
        with httpx.Client() as client:
            client.get(f"{NOWHERE}/v2/health/ready")
        return 0

    assert _run(argparse.Namespace(func=talks)) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "a conch bug" not in err
    assert f"the connection to GET {NOWHERE}/v2/health/ready failed (ConnectError" in err
    assert "the server stopped or does not listen there; check the URL, or the server's log" in err
