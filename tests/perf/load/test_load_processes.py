"""The Locust processes of a load run do not outlive conch, also when conch is SIGKILLed (no cleanup runs)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REFUSED_URL, linear_ensemble
from test_cli import _children, _wait_gone

from conch.builder.repository_build import build_ensemble

RUN = """
import sys
from pathlib import Path
from conch.perf.load.runner import run_load
from conch.perf.load.spec import LoadSpec, archive_targets
from conch.perf.load.stages import Stage
run_load(LoadSpec("sagemaker", sys.argv[1], archive_targets([Path(sys.argv[2])]), [Stage(600, 1, 1)]),
         workers=int(sys.argv[3]))
"""


def _killed_with(command: list[str], expected: int) -> None:
    """Start ``command``, wait for its ``expected`` children, SIGKILL it: the children end too."""
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while len(kids := _children(proc.pid)) < expected:
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"{command[3:]} started {len(kids)} of {expected} load processes")
            time.sleep(0.2)
    finally:
        proc.kill()
        proc.wait()
    for pid in kids:
        _wait_gone(pid)


@pytest.mark.parametrize("workers", [0, 1], ids=["local", "master and worker"])
def test_a_sigkilled_load_run_leaves_no_locust_running(tmp_path: Path, workers: int) -> None:
    archive = build_ensemble(linear_ensemble(f"load_kill{workers}"), tmp_path, "local")
    _killed_with([sys.executable, "-c", RUN, REFUSED_URL, str(archive), str(workers)], 1 + workers)


def test_a_sigkilled_bench_worker_leaves_no_locust_running() -> None:
    with socket.socket() as master:  # accepts the worker's connection and never answers: the worker waits
        master.bind(("127.0.0.1", 0))
        master.listen()
        _killed_with([sys.executable, "-m", "conch.cli", "bench", "--worker", "--master-host", "127.0.0.1",
                      "--master-port", str(master.getsockname()[1])], 1)
