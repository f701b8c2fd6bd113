"""README promises that had no test: the default load timeout, TensorFlow's log level in the processes conch
starts (a value the user set wins), the probe's growth flag, and the digest memo that spares re-reading an
unchanged 90 MB model."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import conch
from conch.cache import RACY_NS
from conch.cli import parser
from conch.cli.console import quiet_tensorflow
from conch.perf.probe import Copy, ProbeResult

FIXTURES = Path(__file__).parent / "fixtures"
CHILD_ENV = [sys.executable, "-c", "import os; print(os.environ.get('TF_CPP_MIN_LOG_LEVEL'))"]


@pytest.mark.parametrize("argv", [["replay", "x.tar.gz"], ["serve", "--mme", "dist/"]], ids=["replay", "serve"])
def test_loads_time_out_after_300_s_by_default(argv: list[str]) -> None:
    """README: "Loads time out (`--load-timeout`, default 300 s; ...)" for the replay and the local MME."""
    assert parser().parse_args(argv).load_timeout == 300.0


def test_conch_sets_tensorflows_log_level_for_the_processes_it_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    """README: conch sets TF_CPP_MIN_LOG_LEVEL=2, inherited by build workers and tritonserver."""
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    with quiet_tensorflow():
        child = subprocess.run(CHILD_ENV, capture_output=True, text=True, check=True)
    assert child.stdout == "2\n"
    assert "TF_CPP_MIN_LOG_LEVEL" not in os.environ  # a program calling main() gets its environment back


def test_a_tensorflow_log_level_the_user_set_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "0")
    with quiet_tensorflow():
        child = subprocess.run(CHILD_ENV, capture_output=True, text=True, check=True)
    assert child.stdout == "0\n" and os.environ["TF_CPP_MIN_LOG_LEVEL"] == "0"


def probe_with_loads(*seconds: float) -> dict[str, object]:
    copies = [Copy(i, f"c{i}", s, 100 * (i + 1), i + 1) for i, s in enumerate(seconds)]
    return ProbeResult("e", "e.tar.gz", 10_000, 0.9, 0, copies).to_json()


def test_the_probe_says_whether_first_calls_grow_with_the_number_of_copies() -> None:
    """README: the probe reports first-call time per copy "and whether it grows with the count"."""
    doubling = probe_with_loads(1.0, 1.0, 1.1, 1.0, 2.0, 2.1, 2.0, 2.2)
    assert doubling["load_time_grows"] is True and doubling["load_s_last_over_first_quarter"] > 1.9
    flat = probe_with_loads(1.0, 1.2, 0.9, 1.1, 1.0, 0.95, 1.05, 1.0)
    assert flat["load_time_grows"] is False
    noisy_but_level = probe_with_loads(1.0, 3.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.1)  # one slow copy in the middle
    assert noisy_but_level["load_time_grows"] is False


ENSEMBLE = """
import numpy as np
from basic_steps import double

from conch import Ensemble, PythonStep, Tensor

big = Ensemble("big", max_batch_size=4)
step = PythonStep("s", double, inputs=[Tensor("x", "FP32", [4])], outputs=[Tensor("y", "FP32", [4])], max_batch_size=4,
                  files={"model.bin": "model.bin"})
big.output("Y", step(big.input("X", "FP32", [4])))
"""

# Builds in a process that counts how often it opens the model file (Python's audit hook sees every open()).
COUNTING_BUILD = """
import os
import sys
opened = []
model = sys.argv[1]
def count(event, args):
    if event == "open" and isinstance(args[0], str) and os.path.abspath(args[0]) == model:
        opened.append(1)
sys.addaudithook(count)
from conch.cli import main
code = main(["build", "big.py", "--out", "dist"])
print(len(opened))
sys.exit(code)
"""


def test_an_unchanged_90_mb_model_is_not_read_again(tmp_path: Path) -> None:
    """README: digests of files on disk are remembered by their stat, "so an unchanged 90 MB
    model is not read again" -- by a later conch process too."""
    (tmp_path / "big.py").write_text(textwrap.dedent(ENSEMBLE))
    model = tmp_path / "model.bin"
    with model.open("wb") as fh:
        fh.truncate(90 * 2**20)
    # a file changed in the last two seconds is read every time (git's racily clean rule): an unchanged model
    # is an older one
    time.sleep(max(0.0, RACY_NS / 1e9 - (time.time() - model.stat().st_ctime)))
    conch_root = str(Path(conch.__file__).resolve().parents[1])  # the conch under test, as in the CLI tests
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(FIXTURES), conch_root]),
           "CONCH_CACHE_DIR": str(tmp_path / "cache")}

    def build() -> int:
        result = subprocess.run([sys.executable, "-c", COUNTING_BUILD, str(model)], cwd=tmp_path, env=env,
                                capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stderr
        return int(result.stdout.splitlines()[-1])

    assert build() >= 1  # read to digest it and to pack it
    assert build() == 0  # a second process: the archive is unchanged and the model is not opened
    os.utime(model, ns=(model.stat().st_atime_ns, model.stat().st_mtime_ns + 10**9))
    assert build() >= 1  # touched: read again
