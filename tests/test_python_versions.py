"""The Python versions pyproject claims, proven: on the oldest and the newest, ``pip install .`` (no extras)
into a fresh virtualenv, then a Python-step ensemble built and replayed on the local tritonserver by that
interpreter's own ``conch``. Slow (a whole install per version); docs/ci-matrix.md, "Python versions"."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.slow, pytest.mark.integration]

ENSEMBLE = '''import numpy as np
from smoke_steps import double

from conch import Ensemble, PythonStep, Tensor

ens = Ensemble("smoke", max_batch_size=4)
step = PythonStep("double", double, inputs=[Tensor("x", "FP32", [4])],
                  outputs=[Tensor("y", "FP32", [4])], max_batch_size=4)
ens.output("Y", step(ens.input("X", "FP32", [4])))
rows = np.arange(8, dtype=np.float32).reshape(2, 4)
ens.sample("rows", {"X": rows}, {"Y": rows * 2})
'''


def interpreter(version: str) -> str | None:
    """pyenv's newest X.Y.*, else ``pythonX.Y`` on PATH; one that starts (a pyenv shim of a version not
    selected does not)."""
    versions = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    found = sorted(versions.glob(f"{version}.*/bin/python{version}"), key=lambda p: p.parent.parent.name)[::-1]
    on_path = shutil.which(f"python{version}")
    for candidate in [*map(str, found), *([on_path] if on_path else [])]:
        if subprocess.run([candidate, "-c", "pass"], capture_output=True, timeout=60, check=False).returncode == 0:
            return candidate
    return None


@pytest.mark.parametrize("version", ["3.10", "3.13"])
def test_install_build_and_replay(version: str, tmp_path: Path) -> None:
    python = interpreter(version)
    if python is None:
        pytest.skip(f"no Python {version} here (pythonX.Y on PATH or pyenv)")
    venv = tmp_path / "venv"
    subprocess.run([python, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", str(ROOT)], capture_output=True, text=True,
                         timeout=1800, check=False)
    assert pip.returncode == 0, pip.stderr[-3000:]
    (tmp_path / "smoke_steps.py").write_text("def double(x):\n    return x * 2\n")
    (tmp_path / "smoke_ensembles.py").write_text(ENSEMBLE)
    env = {**os.environ, "CONCH_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("PYTHONPATH", None)
    conch = str(venv / "bin" / "conch")
    build = subprocess.run([conch, "build", "smoke_ensembles.py", "--target", "local", "--out", "dist"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert build.returncode == 0, build.stderr
    replay = subprocess.run([conch, "replay", "dist/smoke.tar.gz", "--json"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=600, check=False)
    assert replay.returncode == 0, replay.stdout[-2000:] + replay.stderr[-3000:]
    report = json.loads(replay.stdout)
    assert (report["passed_rows"], report["failed_rows"]) == (4, 0), report  # load, KServe, SageMaker JSON, binary
