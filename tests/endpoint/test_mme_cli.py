"""`conch serve --mme` as scripts use it: one JSON line on stdout when ready, `conch invoke` against it without
AWS credentials, and no tritonserver left behind when conch is killed with SIGKILL."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import linear_ensemble, ready_line
from mme_archives import EXPECTED, invoke_linear, runtime

from conch.builder.repository_build import build_ensemble

pytestmark = pytest.mark.integration


def without_aws(env: dict[str, str]) -> dict[str, str]:
    drop = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_REGION",
            "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL")
    return {**{k: v for k, v in env.items() if k not in drop}, "AWS_CONFIG_FILE": "/dev/null",
            "AWS_SHARED_CREDENTIALS_FILE": "/dev/null", "AWS_EC2_METADATA_DISABLED": "true"}


def conch(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "conch.cli", *args], capture_output=True, text=True, timeout=300,
                          env=without_aws(dict(os.environ)))


def alive(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if stat.read_text().rsplit(")", 1)[1].split()[1] == str(pid):
                found.append(int(stat.parent.name))
        except (OSError, IndexError):
            continue
    return found


def listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_serve_mme_prints_one_ready_line_answers_conch_invoke_and_dies_with_conch(tmp_path: Path) -> None:
    archive = build_ensemble(linear_ensemble("cli_mme"), tmp_path / "dist", "local")
    proc = subprocess.Popen(
        [sys.executable, "-m", "conch.cli", "serve", "--mme", str(archive.parent), "--port", "0", "--max-loaded", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=without_aws(dict(os.environ)),
    )
    try:
        assert proc.stdout is not None
        ready = ready_line(proc)
        assert ready["endpoint_name"] == "local" and ready["url"].startswith("http://127.0.0.1:")
        # SageMaker's defaults: the archive's own step names, its 60 s limits, Triton's answers passed on
        assert ready["step_names"] == "shared" and ready["retry_lookup"] is False
        assert ready["invocation_timeout_s"] == 60 and ready["load_wait_s"] == 60
        np.testing.assert_array_equal(invoke_linear(runtime(ready["url"]), archive.name), EXPECTED)
        replayed = conch("invoke", "--endpoint", "local", "--endpoint-url", ready["url"], "--archive", str(archive))
        assert replayed.returncode == 0, replayed.stderr
        assert "2 passed, 0 failed" in replayed.stdout  # the sample as JSON and as binary+json, unchanged
        triton_port = ready["triton"]["sagemaker_port"]
        servers = children(proc.pid)
        stubs = [stub for server in servers for stub in children(server)]  # they hold the server's sockets too
        assert servers and stubs and listening(triton_port)
        proc.send_signal(signal.SIGKILL)  # no chance to clean up: the kernel must take tritonserver down
        proc.wait(timeout=30)
        deadline = time.monotonic() + 30
        while (any(alive(pid) for pid in servers + stubs) or listening(triton_port)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(alive(pid) for pid in servers + stubs)
        assert not listening(triton_port)
        assert proc.stdout.read() == ""  # nothing but the ready line on stdout
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)


def test_serve_refuses_paths_and_mme_together_in_one_line(tmp_path: Path) -> None:
    result = conch("serve", str(tmp_path), "--mme", str(tmp_path))
    assert result.returncode == 2 and "conch: error: give either --mme" in result.stderr
    assert "Traceback" not in result.stderr
    bad_size = conch("serve", "--mme", str(tmp_path), "--memory-budget", "lots")
    assert bad_size.returncode == 2 and "write a size such as 6GiB" in bad_size.stderr


def test_serve_refuses_two_archives_of_one_name_in_one_line(tmp_path: Path) -> None:
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "same.tar.gz").write_bytes(b"not read: refused first")
    result = conch("serve", str(tmp_path / "a" / "same.tar.gz"), str(tmp_path / "b" / "same.tar.gz"))
    assert result.returncode == 2 and "are both named 'same.tar.gz'" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def serve_mme(archive: Path, *options: str) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "conch.cli", "serve", "--mme", str(archive.parent), "--port", "0", *options],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=without_aws(dict(os.environ)),
    )
    assert proc.stdout is not None
    return proc, ready_line(proc)


def test_serve_mme_restarts_a_killed_server_which_still_dies_with_conch(tmp_path: Path) -> None:
    archive = build_ensemble(linear_ensemble("cli_restart"), tmp_path / "dist", "local")
    proc, ready = serve_mme(archive)
    try:
        assert proc.stderr is not None
        rt = runtime(ready["url"])
        np.testing.assert_array_equal(invoke_linear(rt, archive.name), EXPECTED)
        first = children(proc.pid)
        os.kill(first[0], signal.SIGKILL)
        line = "-"
        while line and "restarting it (1 of at most 5)" not in line:
            line = proc.stderr.readline()
        assert line, "conch serve ended without restarting tritonserver"
        np.testing.assert_array_equal(invoke_linear(rt, archive.name), EXPECTED)  # loaded again on this call
        restarted = [pid for pid in children(proc.pid) if pid not in first and alive(pid)]
        assert restarted
        proc.send_signal(signal.SIGKILL)  # the restarted server belongs to a thread of conch: it goes too
        proc.wait(timeout=30)
        deadline = time.monotonic() + 30
        while any(alive(pid) for pid in restarted) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(alive(pid) for pid in restarted)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)


def test_serve_mme_exits_when_the_server_is_not_restarted(tmp_path: Path) -> None:
    archive = build_ensemble(linear_ensemble("cli_gone"), tmp_path / "dist", "local")
    proc, _ = serve_mme(archive, "--max-restarts", "0")
    try:
        os.kill(children(proc.pid)[0], signal.SIGKILL)
        assert proc.wait(timeout=120) == 1
        assert proc.stderr is not None
        stderr = proc.stderr.read()
        assert "conch: error: tritonserver exited and was not restarted again" in stderr
        assert ("served with --step-names shared: 0 tritonserver restarts, 0 step name collisions, 0 'unknown "
                "model' answers (Triton's lookup race), 0 retried") in stderr  # the summary, never silent
        assert "Traceback" not in stderr
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
