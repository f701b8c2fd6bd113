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
    step = TorchScriptStep("scale", torch.jit.script(Scale(factor)), [Tensor("x", "FP32", [WIDTH])],
                           [Tensor("OUTPUT__0", "FP32", [WIDTH])], max_batch_size=2)
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
