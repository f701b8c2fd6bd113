"""The in-process run works however conch was imported: from its own modules, with ``conch``'s public names never
touched, declaring loads no executor and ``conch.executor.run`` runs the declaration; the deprecated
``Ensemble.run`` says, without the executor loaded, to call ``conch.run`` (the declaration imports nothing above
its layer to reach it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
ROOT = Path(__file__).resolve().parent.parent.parent

SCRIPT = """
import sys
import warnings
import numpy as np
from conch.ensembles.ensemble import Ensemble
from conch.ensembles.tensors import Tensor
from conch.backends.python import PythonStep
from conch.errors import RunError
import basic_steps

assert "conch.executor" not in sys.modules, "declaring must not load the executor"
ens = Ensemble("anyhow", max_batch_size=0)
step = PythonStep("double", basic_steps.double, inputs=[Tensor("x", "FP32", [4])], outputs=[Tensor("y", "FP32", [4])])
ens.output("Y", step(ens.input("X", "FP32", [4])))
warnings.simplefilter("ignore", DeprecationWarning)
try:
    ens.run({"X": np.arange(4, dtype=np.float32)})
except RunError as exc:
    print(exc)
from conch.executor import run
print(run(ens, {"X": np.arange(4, dtype=np.float32)}).outputs["Y"].tolist())
"""


def test_the_in_process_run_without_the_public_names_of_conch() -> None:
    env_path = f"{ROOT}:{FIXTURES}"
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"}, check=False)
    assert done.returncode == 0, done.stderr
    said, ran = done.stdout.strip().splitlines()[-2:]
    assert said == ("ensemble 'anyhow': Ensemble.run needs conch's in-process run, which was not loaded (the "
                    "declaration was imported from its own module); call conch.run(ensemble, inputs)")
    assert ran == "[0.0, 2.0, 4.0, 6.0]"
