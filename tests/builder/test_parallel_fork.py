"""A parallel build forks its workers before this process builds anything: building runs the user's models, and
a process forked after a framework started its thread pool can wait forever for a lock one of the parent's
threads held (torch's OpenMP pool: the child hung in ``gomp_team_end`` when this process built the last job
first and forked the workers after it). A real `conch build -j 2` of two TorchScript ensembles whose probe runs
an OpenMP-parallel op, in a subprocess with a time limit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

ENSEMBLES = '''import numpy as np
import torch

from conch import Ensemble, Tensor, TorchScriptStep

WIDTH = 1 << 17  # past torch's grain size (32768 elements): elementwise ops run on the OpenMP pool


class Scale(torch.nn.Module):
    def __init__(self, factor: float) -> None:
        super().__init__()
        self.factor = factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.factor + 1.0


def scaled(name: str, factor: float) -> Ensemble:
    ens = Ensemble(name, max_batch_size=2)
    step = TorchScriptStep("scale", torch.jit.script(Scale(factor)), inputs=[Tensor("x", "FP32", [WIDTH])],
                           outputs=[Tensor("OUTPUT__0", "FP32", [WIDTH])], max_batch_size=2)
    ens.output("Y", step(ens.input("X", "FP32", [WIDTH])))
    ens.sample("ones", {"X": np.ones((1, WIDTH), np.float32)},
               {"Y": np.full((1, WIDTH), factor + 1.0, np.float32)})
    return ens


first = scaled("first", 2.0)
second = scaled("second", 3.0)
'''


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: torch starts no OpenMP team to inherit")
def test_workers_forked_before_this_process_runs_a_model_do_not_hang(tmp_path: Path) -> None:
    (tmp_path / "scaled.py").write_text(ENSEMBLES)
    env = {**os.environ, "CONCH_CACHE_DIR": str(tmp_path / "cache"),  # nothing remembered: both probes run
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "conch", "build", "scaled.py", "--target", "local", "--out", "dist", "-j", "2"]
    build = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, start_new_session=True)  # its own group: a hung worker is stopped too
    try:
        _, stderr = build.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(build.pid, signal.SIGKILL)
        _, stderr = build.communicate()
        pytest.fail(f"`conch build -j 2` of two TorchScript ensembles did not finish in 300 s: {stderr!r}")
    assert build.returncode == 0, stderr
    assert sorted(p.name for p in (tmp_path / "dist").glob("*.tar.gz")) == ["first.tar.gz", "second.tar.gz"]


HANGS = '''import os
import time

if os.getpid() != int(os.environ["COMMAND_PID"]):  # a worker: stuck, as in a model's native code
    with open(os.environ["WORKER_PID_FILE"] + ".part", "w") as fh:
        fh.write(str(os.getpid()))
    os.replace(os.environ["WORKER_PID_FILE"] + ".part", os.environ["WORKER_PID_FILE"])
    time.sleep(600)
'''

COMMAND = '''import os
import sys
from pathlib import Path

from conch.builder.parallel import BuildJob, build_all

os.environ["COMMAND_PID"] = str(os.getpid())
source, out = Path(sys.argv[1]), Path(sys.argv[2])
build_all([BuildJob(source, name, out, "cpu", "r1") for name in ("a", "b")], 2, lambda outcome: None)
'''


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")  # a zombie has exited: only its parent (or init) has yet to reap it


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM])
@pytest.mark.skipif(sys.platform != "linux", reason="the death signal is Linux's (prctl)")
def test_a_worker_stuck_in_a_job_dies_with_the_command(tmp_path: Path, signum: int) -> None:
    """A killed `conch build` leaves no worker behind: SIGKILL and an unhandled SIGTERM run no Python cleanup, so
    a forked worker would live on, orphaned (one stuck in native code outlived a SIGTERM of the command)."""
    (tmp_path / "hangs.py").write_text(HANGS)
    (tmp_path / "command.py").write_text(COMMAND)
    marker = tmp_path / "worker.pid"
    env = {**os.environ, "WORKER_PID_FILE": str(marker), "CONCH_CACHE_DIR": str(tmp_path / "cache"),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    command = subprocess.Popen([sys.executable, str(tmp_path / "command.py"), str(tmp_path / "hangs.py"),
                                str(tmp_path / "out")], cwd=tmp_path, env=env)
    worker = None
    try:
        deadline = time.monotonic() + 60
        while not marker.exists() and command.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), f"the worker never started its job (command exited {command.returncode})"
        worker = int(marker.read_text())
        command.send_signal(signum)
        command.wait(timeout=30)
        deadline = time.monotonic() + 30
        while _alive(worker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(worker), f"worker {worker} outlived the command killed by {signal.Signals(signum).name}"
    finally:
        command.kill()
        command.wait()
        if worker is not None and _alive(worker):
            os.kill(worker, signal.SIGKILL)
