"""conch's pytest plugin, run the way users run it: pytest in a subprocess (pytester) over a folder of
declarations or archives, each sample an item, replayed on a real tritonserver; the local-MME fixture through
boto3; the deployed-endpoint items against a local MME; the entry point autoloaded."""

from __future__ import annotations

import os
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
import tomllib
import tritonclient.http  # noqa: F401 - imported before pytester's snapshot of sys.modules, which drops what a test

# imports and so would load numpy's C types a second time
from conch.builder.discover import load_module_ensembles
from conch.builder.repository_build import build_ensemble
from conch.endpoint.local import ENDPOINT_NAME, LocalMME
from conch.replays.recording import write_payload

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent

STEPS = '''
import numpy as np

def double(x):
    return {"y": (x * 2).astype(np.float32)}

def add_one(y):
    return y + np.float32(1)
'''

DECLARATION = '''
import numpy as np
from _plugin_steps import add_one, double

from conch import Ensemble, PythonStep, Tensor

doubler = PythonStep("double", double, inputs=[Tensor("x", "FP32", [4])],
                     outputs=[Tensor("y", "FP32", [4])], max_batch_size=4)
adder = PythonStep("add_one", add_one, inputs=[Tensor("y", "FP32", [4])],
                   outputs=[Tensor("z", "FP32", [4])], max_batch_size=4)

plugin_linear = Ensemble("plugin_linear", max_batch_size=4)
plugin_linear.output("Z", adder(doubler(plugin_linear.input("X", "FP32", [4]))))
plugin_linear.sample("ones", {"X": np.ones((1, 4), np.float32)}, {"Z": np.full((1, 4), 3, np.float32)})
plugin_linear.sample("wrong", {"X": np.ones((1, 4), np.float32)}, {"Z": np.full((1, 4), 99, np.float32)})
'''

MME_TEST = '''
import json

import numpy as np

def test_the_local_mme_answers_through_boto3(conch_mme):
    assert conch_mme.target_models == ["plugin_linear.tar.gz"]
    body = {"inputs": [{"name": "X", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}
    answer = conch_mme.client.invoke_endpoint(EndpointName=conch_mme.endpoint_name,
                                              TargetModel="plugin_linear.tar.gz",
                                              ContentType="application/json", Body=json.dumps(body))
    (out,) = json.loads(answer["Body"].read())["outputs"]
    assert out["name"] == "Z" and out["data"] == [3, 5, 7, 9]
    got = conch_mme.invoke("plugin_linear.tar.gz", {"X": np.zeros((1, 4), "float32")})
    assert got["Z"].tolist() == [[1, 1, 1, 1]]

def test_the_session_triton_has_the_archives_loaded(conch_triton):
    assert list(conch_triton.loaded) == ["plugin_linear.tar.gz"]
    assert conch_triton.client.describe("plugin_linear.tar.gz") is not None
'''


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A user's project: ensembles/ (a declaration with a right and a deliberately wrong sample) and tests/."""
    (pytester.path / "ensembles").mkdir()
    (pytester.path / "ensembles" / "_plugin_steps.py").write_text(STEPS)
    (pytester.path / "ensembles" / "linear.py").write_text(DECLARATION)
    (pytester.path / "tests").mkdir()
    (pytester.path / "tests" / "test_mme.py").write_text(MME_TEST)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return pytester


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "conch.pytest_plugin", "-p", "no:cacheprovider", "-p", "no:randomly",
                                         *args, timeout=600)


def test_each_sample_is_an_item_and_a_wrong_expected_output_fails_that_item_with_the_figures(
        project: pytest.Pytester) -> None:
    result = _run(project, "--conch", "ensembles", "tests/test_mme.py", "--junitxml=r.xml", "-v")
    result.assert_outcomes(passed=5, failed=3)
    text = result.stdout.str()
    for endpoint in ("kserve", "sagemaker-json", "sagemaker-binary"):
        assert f"plugin_linear[ones @ {endpoint}] PASSED" in text
        assert f"plugin_linear[wrong @ {endpoint}] FAILED" in text
    assert "plugin_linear[wrong @ kserve] failed:\n  Z: max abs err 96 (atol=1e-05 rtol=1e-05)" in text
    root = ET.parse(project.path / "r.xml").getroot()
    cases = {c.get("name"): c for c in root.iter("testcase")}
    assert "plugin_linear[ones @ sagemaker-binary]" in cases
    failure = cases["plugin_linear[wrong @ sagemaker-json]"].find("failure")
    assert failure is not None and "max abs err 96" in (failure.text or "")


def test_archives_and_a_recorded_payload_folder_replay_as_items(project: pytest.Pytester, tmp_path: Path) -> None:

    sys.path.insert(0, str(project.path / "ensembles"))
    try:
        (ensemble,) = load_module_ensembles(project.path / "ensembles" / "linear.py")
        archive = build_ensemble(ensemble, project.path / "built", "local")
    finally:
        sys.path.remove(str(project.path / "ensembles"))
    result = _run(project, "--conch", "built", "-v")
    result.assert_outcomes(passed=3, failed=3)
    x = np.full((1, 4), 2, np.float32)
    write_payload(project.path / "payloads" / "plugin_linear", "twos", "twos", {"X": x}, {"Z": x * 2 + 1}, {})
    result = _run(project, "--conch", str(archive), "--conch-payloads", "payloads", "-v")
    result.assert_outcomes(passed=3)
    assert "plugin_linear[twos @ kserve] PASSED" in result.stdout.str()


def test_the_ini_option_collects_its_paths_and_a_broken_declaration_is_a_collection_error(
        project: pytest.Pytester) -> None:
    project.makeini("[pytest]\nconch_paths = ensembles\n")
    result = _run(project, "ensembles", "--collect-only", "-q")
    assert "plugin_linear[ones @ kserve]" in result.stdout.str()
    (project.path / "ensembles" / "broken.py").write_text("raise RuntimeError('on purpose')\n")
    result = _run(project, "ensembles", "--collect-only", "-q")
    assert "broken.py line 1: RuntimeError: on purpose; fix the file" in result.stdout.str()


def test_deployed_endpoint_items_judge_what_the_endpoint_answers(
        project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """--conch-endpoint against `conch serve`'s local MME (boto3 reaches it as it reaches SageMaker)."""

    sys.path.insert(0, str(project.path / "ensembles"))
    try:
        (ensemble,) = load_module_ensembles(project.path / "ensembles" / "linear.py")
        build_ensemble(ensemble, project.path / "built", "local")
    finally:
        sys.path.remove(str(project.path / "ensembles"))
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "local")
    with LocalMME(project.path / "built") as mme:
        result = _run(project, "--conch", "built", "--conch-endpoint", ENDPOINT_NAME, "--conch-endpoint-url", mme.url,
                      "-v")
    result.assert_outcomes(passed=2, failed=2)
    text = result.stdout.str()
    assert f"plugin_linear[ones @ {ENDPOINT_NAME} (json)] PASSED" in text
    assert f"plugin_linear[wrong @ {ENDPOINT_NAME} (binary)] failed:\n  Z: max abs err 96" in text


def test_the_declared_entry_point_is_autoloaded(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """pytest finds the plugin through the pytest11 entry point pyproject.toml declares (a dist-info holding just
    that entry point stands for the installed package), without -p."""
    entry = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["pytest11"]
    dist = pytester.path / "site" / "conch_entry-0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: conch-entry\nVersion: 0\n")
    (dist / "entry_points.txt").write_text("[pytest11]\n" + "".join(f"{k} = {v}\n" for k, v in entry.items()))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(pytester.path / "site"), str(ROOT),
                                                      os.environ.get("PYTHONPATH", "")]))
    result = pytester.runpytest_subprocess("--help", timeout=120)
    assert "--conch-endpoint=NAME" in result.stdout.str()


KILLER_STEPS = '''
import os
import signal


def kill_server(x):
    os.kill(os.getppid(), signal.SIGKILL)  # the stub's parent: tritonserver
    return {"y": x}
'''

KILLER = '''
import numpy as np
from _killer_steps import kill_server

from conch import Ensemble, PythonStep, Tensor

killer = Ensemble("plugin_killer", max_batch_size=4)
step = PythonStep("kill_server", kill_server, inputs=[Tensor("x", "FP32", [4])], outputs=[Tensor("y", "FP32", [4])],
                  max_batch_size=4)
killer.output("Y", step(killer.input("X", "FP32", [4])))
killer.sample("ones", {"X": np.ones((1, 4), np.float32)}, {"Y": np.ones((1, 4), np.float32)})
'''


def test_a_session_server_killed_by_an_item_fails_that_item_and_is_restarted_for_the_next(
        project: pytest.Pytester) -> None:
    (project.path / "ensembles" / "_killer_steps.py").write_text(KILLER_STEPS)
    (project.path / "ensembles" / "b_killer.py").write_text(KILLER)
    (project.path / "ensembles" / "c_linear.py").write_text(DECLARATION.replace("plugin_linear", "plugin_after"))
    result = _run(project, "--conch", "ensembles", "-v", "-k", "ones")
    result.assert_outcomes(passed=6, failed=3)
    text = result.stdout.str()
    for endpoint in ("kserve", "sagemaker-json", "sagemaker-binary"):
        assert f"plugin_linear[ones @ {endpoint}] PASSED" in text
        assert f"plugin_after[ones @ {endpoint}] PASSED" in text
    assert "plugin_killer[ones @ kserve] failed:\n  tritonserver exited (signal 9) while invoking " \
           "'plugin_killer.tar.gz' (SIGKILL" in text
    assert "conch: the session's tritonserver was restarted 3 time(s): tritonserver exited (signal 9) while the " \
           "session's items ran" in text
