"""Nothing conch starts listens beyond this machine: tritonserver runs in a network namespace whose only interface
is its loopback, reached through sockets on the host's 127.0.0.1; where the platform refuses namespaces, conch
says so once, and counts it (issue 41)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest
from conftest import linear_ensemble
from listeners import (
    exposed,
    host_listeners,
    interfaces,
    namespace_listeners,
    needs_namespaces,
    netns,
    tree,
    tritonserver_pids,
)

from conch.builder.repository_build import build_ensemble
from conch.errors import ServeError
from conch.replays.local_replay import replay_archives
from conch.triton import network_namespace
from conch.triton.server import LocalTriton

pytestmark = pytest.mark.integration

WITHOUT_UNSHARE = os.pathsep.join([str(Path(sys.executable).parent), "/nonexistent"])  # PATH with no unshare(1)


def conch_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (network_namespace.ALLOW_EXPOSED_ENV,
                                                            network_namespace.UNSHARE_ENV)}
    return {**env, **extra}


@needs_namespaces
def test_the_server_listens_on_the_hosts_loopback_and_its_sagemaker_port_in_a_namespace_with_only_lo(
        tmp_path: Path, triton: LocalTriton) -> None:
    assert triton.process is not None
    ports = host_listeners(triton.process.pid)
    assert ports == {triton.http_port: "127.0.0.1", triton.grpc_port: "127.0.0.1", triton.sagemaker_port: "127.0.0.1"}
    assert exposed(triton.process.pid) == ({}, {})
    (server,) = tritonserver_pids(triton.process.pid)
    assert netns(server) != netns(os.getpid()) and interfaces(server) == ["lo"]
    assert namespace_listeners(server)[triton.sagemaker_port] == "0.0.0.0"  # Triton 2.51's, but only lo is there
    # Python stubs share /dev/shm and their IPC with the server there: a Python-backend ensemble replays green
    archive = build_ensemble(linear_ensemble("netns_linear"), tmp_path, "local")
    report = replay_archives([archive], server=triton)
    assert report.passed, report.table()
    assert exposed(triton.process.pid) == ({}, {})  # stubs too


@needs_namespaces
def test_a_crash_of_tritonserver_reads_as_its_signal_and_its_namespace_ends_with_it(tmp_path: Path) -> None:
    with LocalTriton(tmp_path / "w") as server:
        assert server.process is not None
        launcher = server.process.pid
        (inner,) = tritonserver_pids(launcher)
        os.kill(inner, signal.SIGSEGV)
        server.process.wait(timeout=30)
        assert server.exit_status() == "was killed by SIGSEGV"
        with pytest.raises(httpx.TransportError):  # its ports closed with it: refused, not left hanging
            httpx.get(f"{server.sagemaker_url}/ping", timeout=5)


@needs_namespaces
def test_a_sigterm_to_the_launcher_reaches_tritonserver_which_ends_cleanly(tmp_path: Path) -> None:
    with LocalTriton(tmp_path / "w") as server:
        assert server.process is not None
        (inner,) = tritonserver_pids(server.process.pid)
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(timeout=30) == 0, server.log_tail()  # Triton's own clean exit
        assert not psutil.pid_exists(inner) or psutil.Process(inner).status() == psutil.STATUS_ZOMBIE


@needs_namespaces
def test_a_killed_conch_takes_the_launcher_and_tritonserver_down(tmp_path: Path) -> None:
    code = ("import time; from conch.triton.server import LocalTriton\n"
            "t = LocalTriton().start(); print(t.process.pid, flush=True); time.sleep(120)\n")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "CONCH_CACHE_DIR": str(tmp_path / "cache")})
    assert child.stdout is not None
    started = [p.pid for p in tree(int(child.stdout.readline()))]
    assert len(started) == 2  # the launcher and tritonserver
    child.kill()  # SIGKILL: no finally, no atexit
    child.wait()
    _, alive = psutil.wait_procs([psutil.Process(p) for p in started if psutil.pid_exists(p)], timeout=30)
    assert not alive, f"outlived the conch process that started them: {alive}"


def test_the_platform_refusal_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(network_namespace.UNSHARE_ENV, raising=False)
    monkeypatch.setenv("PATH", WITHOUT_UNSHARE)
    assert network_namespace.refused() == "the util-linux command `unshare` was not found"
    monkeypatch.undo()
    monkeypatch.setenv(network_namespace.UNSHARE_ENV, "false")  # a command that runs and fails, as unshare does
    assert re.fullmatch(r"`\S+false --user --map-root-user --net` failed: exit code 1", network_namespace.refused())


def serve(archive: Path, env: dict[str, str], *flags: str) -> tuple[dict[str, object], str, dict[int, str]]:
    """Serve ``archive`` until ready, note its host listeners, then Ctrl-C it: (ready line, stderr, listeners)."""
    # SIGINT at its default, as from a terminal: a suite run as a background job starts with it ignored (POSIX),
    # and Python keeps it ignored in every child (as in test_cli.py's Ctrl-C test)
    proc = subprocess.Popen([sys.executable, "-m", "conch.cli", "serve", str(archive), "--port", "0", *flags],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, proc.communicate(timeout=60)[1]
        ports = host_listeners(proc.pid)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        return json.loads(line), err, ports
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_serve_without_namespaces_says_so_once_names_the_port_and_counts_it(tmp_path: Path) -> None:
    archive = build_ensemble(linear_ensemble("netns_refused"), tmp_path / "dist", "local")
    # a PATH without unshare(1) would hide what tritonserver starts its Python stubs with, too
    ready, err, ports = serve(archive, conch_env(**{network_namespace.UNSHARE_ENV: "/nonexistent/unshare"}))
    port = ready["triton"]["sagemaker_port"]  # type: ignore[index]
    assert ports[port] == "0.0.0.0"
    assert err.count(f"tritonserver's SageMaker port {port} listens on every interface of this machine while conch "
                     "runs: the util-linux command `/nonexistent/unshare` was not found") == 1, err
    assert "--allow-exposed-triton" in err
    assert "1 tritonserver starts with its SageMaker port open on every interface" in err
    _, quiet_err, _ = serve(archive, conch_env(**{network_namespace.UNSHARE_ENV: "false"}),
                                  "--allow-exposed-triton")
    assert "listens on every interface" not in quiet_err, quiet_err
    assert "1 tritonserver starts with its SageMaker port open on every interface" in quiet_err


def watched(args: list[str], cwd: Path) -> str:
    """Run ``python -m ARGS`` to its end, reading every 50 ms what its process tree exposes; its output. Asserts
    that it passed, that one tritonserver was seen with conch's three host listeners at least, and that no
    reading found a listener outside loopback, nor a namespace with an interface besides ``lo``."""
    proc = subprocess.Popen([sys.executable, "-m", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=conch_env(), cwd=cwd)
    seen: list[tuple[dict[int, str], dict[str, list[str]]]] = []
    servers = listened = 0
    while proc.poll() is None:
        try:
            seen.append(exposed(proc.pid))
            servers = max(servers, len(tritonserver_pids(proc.pid)))
            listened = max(listened, len(host_listeners(proc.pid)))
        except psutil.Error:
            pass  # a process ended while it was read
        time.sleep(0.05)
    out, _ = proc.communicate()
    assert proc.returncode == 0, out
    assert servers == 1 and listened >= 3, out  # tritonserver was seen running, its HTTP, gRPC and SageMaker ports
    assert all(sample == ({}, {}) for sample in seen), [s for s in seen if s != ({}, {})]
    return out


@needs_namespaces
def test_replay_listens_on_loopback_only_while_it_runs(tmp_path: Path) -> None:
    archive = build_ensemble(linear_ensemble("netns_replay"), tmp_path / "dist", "local")
    watched(["conch.cli", "replay", str(archive)], tmp_path)


@pytest.mark.slow
@needs_namespaces
def test_bench_on_the_local_mme_listens_on_loopback_only_while_it_runs(tmp_path: Path) -> None:
    archive = build_ensemble(linear_ensemble("netns_bench"), tmp_path / "dist", "local")
    watched(["conch.cli", "bench", str(archive), "--mme", "--stages", "test", "--workers", "1", "--out",
             str(tmp_path / "out")], tmp_path)


@needs_namespaces
def test_pytest_conch_listens_on_loopback_only_while_it_runs(tmp_path: Path) -> None:
    archive = build_ensemble(linear_ensemble("netns_pytest"), tmp_path / "dist", "local")
    out = watched(["pytest", "--conch", str(archive), "-p", "no:cacheprovider", "-q"], tmp_path)
    assert " passed" in out and "failed" not in out, out


def test_a_port_extra_args_need_that_is_taken_is_named(tmp_path: Path) -> None:
    with network_namespace.loopback_listener() as taken:
        port = taken.getsockname()[1]
        server = LocalTriton(tmp_path / "w")
        server.extra_ports = (port,)  # as `conch profile` asks for its --metrics-port
        with pytest.raises(ServeError, match=rf"could not listen on 127.0.0.1 for tritonserver's ports \({port},\): "):
            server.start()
        assert not server.running()


@pytest.mark.slow
def test_pytest_conch_without_namespaces_warns_in_its_summary_unless_allowed(tmp_path: Path) -> None:
    archive = build_ensemble(linear_ensemble("netns_plugin"), tmp_path / "dist", "local")
    env = conch_env(**{network_namespace.UNSHARE_ENV: "/nonexistent/unshare"})
    command = [sys.executable, "-m", "pytest", "--conch", str(archive), "-p", "no:cacheprovider", "-q"]
    warned = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert warned.returncode == 0, warned.stdout + warned.stderr
    assert "listens on every interface of this machine while conch runs" in warned.stdout, warned.stdout
    allowed = subprocess.run([*command, "--conch-allow-exposed-triton"], capture_output=True, text=True, env=env,
                             cwd=tmp_path, timeout=300)
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    assert "listens on every interface" not in allowed.stdout + allowed.stderr, allowed.stdout
