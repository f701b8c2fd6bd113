"""A tritonserver that dies names itself: the call that finds it gone says how it exited and where its log is
kept, and `conch replay` over several archives marks the rows it could not run, restarts it, goes on with the
next archive and counts the restart (non-zero exit)."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from pathlib import Path

import basic_steps
import numpy as np
import psutil
import pytest
from conftest import linear_ensemble

from conch import Ensemble, PythonStep, ServeError, Tensor
from conch.builder.repository_build import build_ensemble
from conch.cli import main
from conch.replays.local_replay import stage
from conch.triton.mme import MultiModelClient
from conch.triton.server import STUB, LocalTriton, ServerExited

pytestmark = pytest.mark.integration


def killing(name: str) -> Ensemble:
    """One step whose execute kills the tritonserver running it (SIGKILL to the stub's parent)."""
    ens = Ensemble(name, max_batch_size=4)
    step = PythonStep("kill_server", basic_steps.kill_server, inputs=[Tensor("x", "FP32", [4])],
                      outputs=[Tensor("y", "FP32", [4])], max_batch_size=4)
    ens.output("Y", step(ens.input("X", "FP32", [4])))
    ens.sample("ones", {"X": np.ones((1, 4), np.float32)}, {"Y": np.ones((1, 4), np.float32)})
    return ens


def test_a_call_to_a_killed_server_names_the_signal_and_keeps_the_log(tmp_path: Path) -> None:
    archive = build_ensemble(killing("killed_in_call"), tmp_path, "local")
    with LocalTriton() as triton:
        client = MultiModelClient(triton.sagemaker_url, triton.http_url, server=triton)
        client.load(archive.name, stage(archive, triton), 120)
        first = triton.process.pid if triton.process else 0
        with pytest.raises(ServerExited, match=r"tritonserver exited \(signal 9\) while invoking "
                           r"'killed_in_call.tar.gz' \(SIGKILL: killed from outside") as caught:
            client.invoke_binary(archive.name, {"X": np.ones((1, 4), np.float32)})
        assert caught.value.code == -signal.SIGKILL and not triton.running()
        assert caught.value.log is not None and caught.value.log.is_file()
        assert f"its log is kept in {caught.value.log}" in str(caught.value)
        assert "Successfully loaded" in caught.value.log.read_text() or "loaded" in caught.value.log.read_text()
        with pytest.raises(ServerExited, match=r"tritonserver exited \(signal 9\) while describing"):
            client.describe(archive.name)
        triton.restart()
        assert triton.running() and triton.process is not None and triton.process.pid != first
    assert caught.value.log.is_file()  # kept after the server's workdir went


def test_replay_of_three_archives_with_the_server_killed_during_the_second(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    archives = [build_ensemble(linear_ensemble("death_first"), tmp_path, "local"),
                build_ensemble(killing("death_second"), tmp_path, "local"),
                build_ensemble(linear_ensemble("death_third"), tmp_path, "local")]
    code = main(["replay", *map(str, archives)])
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("death_")]
    first = [r for r in rows if r.startswith("death_first")]
    second = [r for r in rows if r.startswith("death_second")]
    third = [r for r in rows if r.startswith("death_third")]
    assert len(first) == len(third) == 4 and all("  ok  " in r for r in first + third), out
    samples = [r for r in second if " ones " in r]
    assert len(samples) == 3 and all("FAIL" in r for r in samples), out  # one row per endpoint
    assert "tritonserver exited (signal 9) while invoking 'death_second.tar.gz'" in samples[0], out
    assert all("tritonserver exited (signal 9)" in r for r in samples[1:]), out
    assert "tritonserver restarted 1 time(s): tritonserver exited (signal 9) while invoking 'death_second.tar.gz'" \
        in out
    assert code == 1


def test_an_unload_given_up_says_the_server_goes_on_unloading(tmp_path: Path) -> None:
    archive = build_ensemble(linear_ensemble("unload_given_up"), tmp_path, "local")
    with LocalTriton() as triton, MultiModelClient(triton.sagemaker_url, triton.http_url, server=triton) as client:
        client.load(archive.name, stage(archive, triton), 120)
        with pytest.raises(ServeError, match=r"unloading 'unload_given_up.tar.gz' did not finish within 0 s; the "
                           "server goes on unloading it"):
            client.unload(archive.name, timeout=0.001)
        assert triton.running()


def test_the_stubs_of_a_server_that_died_are_killed_even_when_another_thread_reaped_it(tmp_path: Path) -> None:
    """A stub inherits the server's connections: one left alive holds a call in flight for its whole timeout.
    The stubs are stopped (SIGSTOP) so that they cannot notice the dead server and exit on their own; a thread
    reaps the server as the local MME's watcher does. Only the kill of the server's group can end them."""
    archive = build_ensemble(linear_ensemble("reaped_first"), tmp_path, "local")
    with LocalTriton() as triton:
        client = MultiModelClient(triton.sagemaker_url, triton.http_url, server=triton)
        client.load(archive.name, stage(archive, triton), 120)
        assert triton.process is not None
        server = psutil.Process(triton.process.pid)
        stubs = [p for p in server.children(recursive=True) if p.name().startswith(STUB[:15])]
        assert stubs
        for stub in stubs:
            stub.suspend()
        reaped = threading.Event()

        def reap() -> None:
            until = time.monotonic() + 30
            while triton.exit_code() is None and time.monotonic() < until:
                time.sleep(0.001)
            if triton.exit_code() is not None:
                reaped.set()

        reaper = threading.Thread(target=reap, daemon=True)
        reaper.start()
        try:
            server.kill()
            reaper.join(30)
            assert reaped.is_set()
            deadline = time.monotonic() + 30
            while (alive := [s for s in stubs if _alive(s)]) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert not alive, f"stubs outlived their server: {alive}"
        finally:
            for stub in stubs:
                with contextlib.suppress(psutil.Error):
                    stub.kill()


def _alive(process: psutil.Process) -> bool:
    """Running, stopped or asleep; not a zombie (a dead stub waits for whoever inherited it to reap it)."""
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
