"""The Python backend's shared-memory regions do not outlive a killed server (they are machine memory)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import linear_ensemble

from conch.builder.repository_build import build_ensemble
from conch.replays.local_replay import replay_archives
from conch.triton import shm_regions
from conch.triton.server import LocalTriton

pytestmark = pytest.mark.integration


def regions(prefix: str) -> list[str]:
    return [p.name for p in shm_regions.SHM_DIR.iterdir() if p.name.startswith(prefix)]


def test_regions_of_a_server_killed_by_sigkill_are_removed_on_stop(tmp_path: Path) -> None:
    archive = build_ensemble(linear_ensemble("shm_kill"), tmp_path, "local")
    server = LocalTriton().start()
    try:
        assert replay_archives([archive], server=server, endpoints=("kserve",)).passed
        assert regions(server.shm_prefix), "the loaded Python steps created no region under conch's prefix"
        assert server.process is not None
        os.killpg(server.process.pid, signal.SIGKILL)  # no chance for the stubs to clean up
        server.process.wait(timeout=30)
        assert regions(server.shm_prefix), "SIGKILL left nothing behind: this test proves nothing"
    finally:
        server.stop()
    assert regions(server.shm_prefix) == []


def test_regions_of_conch_processes_that_are_gone_are_swept_at_the_next_start() -> None:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    orphan = shm_regions.SHM_DIR / f"conch_{gone.stdout.strip()}_0badc0de_region"
    live = shm_regions.SHM_DIR / f"conch_{os.getpid()}_0badc0de_region"  # a running conch's: kept
    other = shm_regions.SHM_DIR / "triton_python_backend_shm_region_not_conchs"  # another program's: kept
    for path in (orphan, live, other):
        path.write_bytes(b"x")
    try:
        with LocalTriton():
            assert not orphan.exists()
            assert live.exists() and other.exists()
    finally:
        for path in (orphan, live, other):
            path.unlink(missing_ok=True)


def test_a_region_named_with_a_number_no_process_can_have_is_swept_without_an_error() -> None:
    stray = shm_regions.SHM_DIR / "conch_99999999999999999999_0badc0de_region"  # os.kill would overflow on it
    stray.write_bytes(b"x")
    try:
        assert shm_regions.sweep_orphans() >= 1
        assert not stray.exists()
    finally:
        stray.unlink(missing_ok=True)
