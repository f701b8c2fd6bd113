"""A load run whose generator cannot start ends with an error that says so and shows the generator's own
log, instead of an empty report."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest
from conftest import REFUSED_URL, linear_ensemble

from conch.builder.repository_build import build_ensemble
from conch.errors import BenchError
from conch.perf.load.runner import run_load
from conch.perf.load.spec import LoadSpec, archive_targets
from conch.perf.load.stages import Stage


def test_a_master_port_already_taken_ends_the_run_with_the_generators_log(tmp_path: Path) -> None:
    archive = build_ensemble(linear_ensemble("load_port"), tmp_path, "local")
    spec = LoadSpec("sagemaker", REFUSED_URL, archive_targets([archive]), [Stage(2, 1, 1)])
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(BenchError, match=r"the load generator wrote no results\n(.|\n)*Address already in use"):
            run_load(spec, remote_workers=1, port=port)  # a port fixed for workers elsewhere (local ones need none)


@pytest.mark.slow  # the master waits WAIT_FOR_WORKERS_S (60 s) for its workers before it gives up
def test_remote_workers_that_never_connect_end_the_run_saying_how_many_came(tmp_path: Path) -> None:
    archive = build_ensemble(linear_ensemble("load_alone"), tmp_path, "local")
    spec = LoadSpec("sagemaker", REFUSED_URL, archive_targets([archive]), [Stage(2, 1, 1)])
    with pytest.raises(BenchError, match=r"load generator: only 0 of 1 workers connected within 60 s"):
        run_load(spec, remote_workers=1)


def test_bench_against_an_unreachable_url_exits_non_zero_with_the_count(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    from conch.cli import main

    archive = build_ensemble(linear_ensemble("load_nowhere"), tmp_path, "local")
    code = main(["bench", str(archive), "--endpoint-url", "http://127.0.0.1:9", "--stages",
                 '[{"duration": 2, "users": 1, "spawn_rate": 1}]', "--wait", "0.2", "--out", str(tmp_path / "out")])
    assert code == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert re.search(r"bench failed: (\d+) of \1 requests failed", last), last
