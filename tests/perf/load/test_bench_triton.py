"""`conch bench` against a real local Triton (KServe v2): short stages, two small archives, answers checked."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import linear_ensemble

from conch.builder.repository_build import build_ensemble
from conch.cli import main
from conch.ensembles.dtypes import DType
from conch.ensembles.samples import decode_array, encode_array
from conch.perf.load.bench_run import local_triton
from conch.perf.load.run_summary import summarise
from conch.perf.load.runner import run_load
from conch.perf.load.spec import LoadSpec, archive_targets
from conch.perf.load.stages import Stage

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def archives(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    out = tmp_path_factory.mktemp("dist")
    return [build_ensemble(linear_ensemble(name), out, "local") for name in ("load_a", "load_b")]


def test_bench_writes_json_and_png_with_throughput_and_correct_answers(archives: list[Path], tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", *map(str, archives), "--triton", "--stages", "test", "--out", str(tmp_path)]) == 0
    summary = json.loads((tmp_path / "bench.json").read_text())
    assert [s["users"] for s in summary["per_stage"]] == [1, 2, 4]
    assert summary["requests"] > 0 and summary["failures"] == 0 and summary["first_failure"] is None
    # each request counts in the stage it started in: no stage has to see one finish within its 3 s on a busy
    # machine, but together they hold the run's requests, all answered correctly
    staged = sum(s["requests"] for s in summary["per_stage"])
    assert 1 <= staged <= summary["requests"] and all(s["failures"] == 0 for s in summary["per_stage"])
    assert set(summary["per_target"]) == {a.name for a in archives}
    assert summary["cold"]["requests"] >= 2  # each TargetModel's first call
    assert (tmp_path / "bench.png").read_bytes()[:4] == b"\x89PNG"
    assert "no failed request" in capsys.readouterr().out


def test_master_and_two_workers_count_wrong_answers_as_failures(archives: list[Path]) -> None:
    targets = archive_targets(archives, body_kind="json")
    request = targets[1].requests[0]
    wrong = decode_array(request.expected["Z"]) + 100  # load_b now "answers wrongly"
    request.expected["Z"] = encode_array(wrong, DType.FP32)
    with local_triton([(a, a.name) for a in archives]) as url:
        spec = LoadSpec("kserve", url, targets, [Stage(4, 2, 2), Stage(8, 4, 4)], zipf=0.5)
        result = run_load(spec, workers=2)
    summary = summarise(result)
    assert summary["workers"] == 2
    good, bad = summary["per_target"]["load_a.tar.gz"], summary["per_target"]["load_b.tar.gz"]
    assert good["requests"] > 0 and good["failures"] == 0
    assert bad["requests"] > 0 and bad["failures"] == bad["requests"]
    assert summary["errors"] and all(e.startswith("wrong answer: Z") for e in summary["errors"])
    assert summary["first_failure"]["target"] == "load_b.tar.gz"


def test_a_worker_started_with_conch_bench_worker_joins_the_master(archives: list[Path]) -> None:
    """What a worker on another machine runs: it needs no archives, the master sends the payloads."""
    started: list[subprocess.Popen[bytes]] = []
    events: list[dict[str, Any]] = []

    def start_worker(event: dict[str, Any]) -> None:
        """Started once the master reports the port it bound (port 0: the system picked a free one)."""
        events.append(event)
        if event.get("event") == "master":
            started.append(subprocess.Popen([sys.executable, "-m", "conch.cli", "bench", "--worker", "--master-host",
                                             "127.0.0.1", "--master-port", str(event["port"])],
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

    try:
        with local_triton([(a, a.name) for a in archives]) as url:
            spec = LoadSpec("kserve", url, archive_targets(archives), [Stage(4, 2, 2)])
            summary = summarise(run_load(spec, remote_workers=1, port=0, progress=start_worker))
        (worker,) = started
        assert worker.wait(timeout=60) == 0  # the master's quit ends it
    finally:
        for process in started:
            if process.poll() is None:
                process.kill()
                process.wait()
    assert summary["workers"] == 1 and summary["requests"] > 0 and summary["failures"] == 0, events


def test_bench_without_a_target_says_which_to_choose(archives: list[Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", str(archives[0])]) == 2
    assert "choose a target: --mme" in capsys.readouterr().err
    assert main(["bench", "no/such.tar.gz", "--triton"]) == 2
    assert "no/such.tar.gz: no such archive" in capsys.readouterr().err
