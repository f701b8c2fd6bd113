"""A missing optional package is one error line naming the extra to install, before the command does any
work. The package is hidden in the conch process (``sys.modules[name] = None``), not uninstalled."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conch.cli.extras import installed

ROOT = Path(__file__).resolve().parents[2]
ANYWHERE = ROOT / "tests" / "fixtures" / "anywhere"


def conch_without(module: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`conch <args>` in a process where ``module`` cannot be imported."""
    code = (f"import sys; sys.modules[{module!r}] = None\n"
            "from conch.cli import main\nsys.exit(main(sys.argv[1:]))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env=env)


@pytest.mark.parametrize(("module", "args", "expected"), [
    ("locust", ["bench", "--mme", "--stages", "test", "--out", "out"],
     "conch bench needs locust, which is not installed: pip install 'conch[bench]'"),
    ("matplotlib", ["plan", "--ensembles", "10", "--rps", "5", "--memory-per-model", "1GiB", "--out", "out"],
     "conch plan needs matplotlib, which is not installed: pip install 'conch[bench]'"),
    ("torch", ["build", str(ANYWHERE), "--out", "out"],
     "conch build: ensemble 'three_frameworks' step 'halve' (pytorch) needs torch, which is not installed: "
     "pip install 'conch[pytorch]'"),
    ("tensorflow", ["run", str(ANYWHERE)],
     "conch run: ensemble 'three_frameworks' step 'graph' (tensorflow) needs tensorflow, which is not installed: "
     "pip install 'conch[tensorflow]'"),
    ("nvidia.dali", ["replay", str(ANYWHERE)],
     "conch replay: ensemble 'three_frameworks' step 'dali' (dali) needs nvidia.dali, which is not installed: "
     "pip install 'conch[dali]'"),
], ids=["bench-locust", "plan-matplotlib", "build-torch", "run-tensorflow", "replay-dali"])
def test_a_missing_package_is_one_line_naming_the_extra_before_any_work(module: str, args: list[str], expected: str,
                                                                         tmp_path: Path) -> None:
    done = conch_without(module, *args, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip() == f"conch: error: {expected}"
    assert not (tmp_path / "out").exists()  # nothing was started, nothing written
    assert done.stdout == ""


@pytest.mark.parametrize("command", [["build", "--out", "out"], ["graph"]])
def test_an_ensemble_file_importing_a_missing_package_names_the_extra(command: list[str], tmp_path: Path) -> None:
    (tmp_path / "needs_torch.py").write_text("import torch  # noqa: F401\nfrom conch import Ensemble\n")
    done = conch_without("torch", command[0], "needs_torch.py", *command[1:], cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip() == ("conch: error: needs_torch.py line 1 needs torch, which is not installed: "
                                   "pip install 'conch[pytorch]'")


def test_a_hidden_module_counts_as_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    assert installed("json")
    monkeypatch.setitem(sys.modules, "json", None)
    assert not installed("json") and not installed("no_such_package_here.sub")


def test_a_conda_environment_needs_conda_pack_before_the_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    from conch.cli.extras import check_command
    from conch.errors import DependencyError

    (tmp_path / "conda_steps.py").write_text("def double(x):\n    return {'y': x * 2}\n")
    (tmp_path / "with_conda.py").write_text(
        "from conda_steps import double\n"
        "from conch import Ensemble, PythonEnv, PythonStep, Tensor\n"
        "step = PythonStep('double', double, inputs=[Tensor('x', 'FP32', [4])], outputs=[Tensor('y', 'FP32', [4])],\n"
        f"                  env=PythonEnv(conda_prefix={str(tmp_path / 'env')!r}))\n"
        "with_conda = Ensemble('with_conda')\n"
        "with_conda.output('Y', step(with_conda.input('X', 'FP32', [4])))\n")
    monkeypatch.setitem(sys.modules, "conda_pack", None)
    args = argparse.Namespace(command="build", paths=[tmp_path / "with_conda.py"])
    with pytest.raises(DependencyError, match=r"^conch build: ensemble 'with_conda' step 'double' \(python\) needs "
                                              r"conda_pack, which is not installed: pip install 'conch\[conda\]'$"):
        check_command(args)
    args.command = "run"  # running it in-process packs nothing
    check_command(args)
