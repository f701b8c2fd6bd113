"""``Ensemble.run`` works however conch was imported: from its own modules, with ``conch``'s public names never
touched (the executor used to be reachable only after ``from conch import ...`` had loaded it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
ROOT = Path(__file__).resolve().parent.parent.parent

SCRIPT = """
import sys
import numpy as np
from conch.ensembles.ensemble import Ensemble
from conch.ensembles.tensors import Tensor
from conch.backends.python import PythonStep
import basic_steps

assert "conch.executor" not in sys.modules, "declaring must not load the executor"
ens = Ensemble("anyhow", max_batch_size=0)
step = PythonStep("double", basic_steps.double, [Tensor("x", "FP32", [4])], [Tensor("y", "FP32", [4])])
ens.output("Y", step(ens.input("X", "FP32", [4])))
print(ens.run({"X": np.arange(4, dtype=np.float32)}).outputs["Y"].tolist())
"""


def test_ensemble_run_without_the_public_names_of_conch() -> None:
    env_path = f"{ROOT}:{FIXTURES}"
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"}, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[0.0, 2.0, 4.0, 6.0]"
