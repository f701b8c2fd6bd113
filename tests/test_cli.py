"""The command line as users and CI scripts run it: separate processes, exit codes, messages."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
PIPELINES = FIXTURES / "cli_ensembles" / "pipelines.py"


def conch(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(FIXTURES), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "conch.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def test_builds_in_two_processes_are_byte_identical(tmp_path: Path) -> None:
    for out in ("a", "b"):
        result = conch("build", str(PIPELINES), "--out", str(tmp_path / out))
        assert result.returncode == 0, result.stderr
    assert (tmp_path / "a" / "cli_linear.tar.gz").read_bytes() == (tmp_path / "b" / "cli_linear.tar.gz").read_bytes()


def test_a_declaration_error_is_one_clear_line_without_traceback(tmp_path: Path) -> None:
    result = conch("build", str(FIXTURES / "cli_bad"), "--out", str(tmp_path))
    assert result.returncode == 2
    assert "conch: error: ensemble 'bad_unused': input 'FORGOTTEN' is not used by any step" in result.stderr
    assert "Traceback" not in result.stderr
    assert not list(tmp_path.iterdir())


def test_bad_release_is_refused(tmp_path: Path) -> None:
    result = conch("build", str(PIPELINES), "--out", str(tmp_path), "--release", "24.13")
    assert result.returncode == 2 and "release '24.13': write it as YY.MM" in result.stderr


def test_inspect_and_graph(tmp_path: Path) -> None:
    assert conch("build", str(PIPELINES), "--out", str(tmp_path), "--target", "local").returncode == 0
    shown = conch("inspect", str(tmp_path / "cli_linear.tar.gz"))
    assert shown.returncode == 0 and "target local" in shown.stdout and "cli_linear__double" in shown.stdout
    dot = conch("graph", str(PIPELINES))
    assert dot.returncode == 0 and '"double" -> "add_one"' in dot.stdout


@pytest.mark.integration
def test_replay_from_sources_and_from_archives(tmp_path: Path) -> None:
    from_sources = conch("replay", str(PIPELINES))
    assert from_sources.returncode == 0, from_sources.stderr
    assert "cli_linear.tar.gz" in from_sources.stdout and "4 passed, 0 failed" in from_sources.stdout
    assert conch("build", str(PIPELINES), "--out", str(tmp_path), "--target", "local").returncode == 0
    from_archives = conch("replay", str(tmp_path), "--endpoint", "sagemaker-json")
    assert from_archives.returncode == 0 and "2 passed, 0 failed" in from_archives.stdout


def _children(pid: int) -> list[int]:
    kids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            kids.append(int(stat.parent.name))
    return kids


def _lines_until(stream: IO[str], marker: str, timeout: float) -> list[str]:
    """Lines read from ``stream`` until one contains ``marker``; the deadline holds even while nothing arrives."""
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        for line in stream:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while not seen or marker not in seen[-1]:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            pytest.fail(f"no {marker!r} within {timeout} s; output so far:\n{''.join(seen)}")
        if line is None:
            pytest.fail(f"the output ended before {marker!r}:\n{''.join(seen)}")
        seen.append(line)
    return seen


@pytest.mark.integration
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_serve_stops_the_server_and_its_stubs_on_a_signal(signum: int) -> None:
    env = {**os.environ, "PYTHONPATH": str(FIXTURES)}
    # as from a terminal: SIGINT at its default even when the suite runs as a background job of a script, which
    # starts with SIGINT ignored (POSIX), inherited by every child and kept ignored by Python
    proc = subprocess.Popen([sys.executable, "-m", "conch.cli", "serve", str(PIPELINES), "--port", "0"],
                            stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert proc.stderr is not None
        _lines_until(proc.stderr, "Ctrl-C stops", timeout=120)
        servers = _children(proc.pid)
        assert servers, "conch serve started no tritonserver"
        stubs = [k for s in servers for k in _children(s)]
        assert stubs, "the loaded ensemble's Python steps run no stub"
        proc.send_signal(signum)
        assert proc.wait(timeout=60) == 128 + signum
    finally:
        if proc.poll() is None:
            proc.kill()
    for pid in servers + stubs:
        _wait_gone(pid)


def _wait_gone(pid: int) -> None:
    """Process ``pid`` exits (or is a zombie of an exited parent) within 30 s."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return
        if state == "Z":
            return
        time.sleep(0.1)
    pytest.fail(f"process {pid} still runs 30 s after conch exited")


@pytest.mark.integration
def test_replay_exits_non_zero_on_a_mismatch() -> None:
    result = conch("replay", str(FIXTURES / "cli_mismatch"), "--endpoint", "kserve")
    assert result.returncode == 1, result.stderr
    assert "FAIL" in result.stdout and "max abs err 1" in result.stdout
    assert "1 passed, 1 failed" in result.stdout  # the load, then the sample


def test_the_same_ensemble_name_in_two_files_is_refused(tmp_path: Path) -> None:
    result = conch("build", str(FIXTURES / "cli_twins"), "--out", str(tmp_path))
    assert result.returncode == 2
    assert "conch: error: ensemble name 'twin' is declared in both" in result.stderr
    assert "one.py and" in result.stderr and "two.py" in result.stderr
    assert not list(tmp_path.iterdir())


def test_repo_dir_holds_the_same_files_as_the_archive(tmp_path: Path) -> None:
    import tarfile

    result = conch("build", str(PIPELINES), "--out", str(tmp_path / "dist"), "--repo-dir", str(tmp_path / "repos"))
    assert result.returncode == 0, result.stderr
    folder = tmp_path / "repos" / "cli_linear"
    with tarfile.open(tmp_path / "dist" / "cli_linear.tar.gz") as tar:
        for member in tar.getmembers():
            if member.isfile():
                data = tar.extractfile(member).read()  # type: ignore[union-attr]
                assert (folder / member.name).read_bytes() == data
    assert (folder / "cli_linear" / "1").is_dir()


@pytest.mark.integration
def test_replay_checks_each_output_its_own_way() -> None:
    result = conch("replay", str(FIXTURES / "cli_checks"), "--endpoint", "kserve")
    assert result.returncode == 1, result.stderr
    rows = {line.split()[0]: line for line in result.stdout.splitlines() if "kserve" in line}
    # scores off by 2x, far beyond any element-wise tolerance, yet the ranking holds: passes
    assert " ok " in rows["cli_topk.tar.gz"] and "PROBS: top-1 equal, top-3 set equal" in rows["cli_topk.tar.gz"]
    # the text output is right (and says "exact", no numeric tolerance); the scores are not: the row fails
    wrong = rows["cli_per_output.tar.gz"]
    assert " FAIL " in wrong and "LABEL: exact" in wrong and "(atol=0.001 rtol=0)" in wrong, wrong
    assert "3 passed, 1 failed" in result.stdout  # two loads, one sample each


def test_the_parser_loads_no_http_client_or_server_stack() -> None:
    """`conch --help` and every argument error stay quick: tritonclient (gevent), starlette, uvicorn,
    boto3 and locust are loaded by the commands that use them, not by the parser; nor is the parallel build."""
    heavy = ("tritonclient.http", "gevent", "starlette", "uvicorn", "boto3", "locust", "conch.builder.parallel")
    code = f"import sys, conch.cli; conch.cli.parser(); print([m for m in {heavy!r} if m in sys.modules])"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_python_dash_m_conch_is_the_conch_command() -> None:
    """`python -m conch` works as the installed `conch` does (helpers and scripts reach for it)."""
    shown = subprocess.run([sys.executable, "-m", "conch", "build", "--help"], capture_output=True, text=True,
                           timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("usage: conch build")


def test_a_program_run_leaves_its_objects_to_the_exit_and_a_call_does_not(tmp_path: Path) -> None:
    """Run as the program (``main()`` reading sys.argv), conch freezes the collector once the command is done,
    so the interpreter's exit frees what is left without walking every object; a caller of ``main(argv)``
    keeps its collector as it was."""
    code = ("import gc, sys, conch.cli\n"
            "assert conch.cli.main(['inspect', 'missing.tar.gz']) == 2 and gc.get_freeze_count() == 0\n"
            "sys.argv = ['conch', 'inspect', 'missing.tar.gz']\n"
            "print(conch.cli.main(), gc.get_freeze_count() > 0)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert result.stdout.split() == ["2", "True"], result.stderr
