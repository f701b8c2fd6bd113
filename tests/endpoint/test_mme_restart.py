"""tritonserver dying under a running local MME (SIGKILL here, a segfault in the wild): the endpoint restarts it,
answers what was in flight with an error that says so, and loads every TargetModel again on its next call."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import basic_steps
import httpx
import numpy as np
import pytest
import restart_steps
from botocore.exceptions import ClientError
from conftest import linear_ensemble
from mme_archives import EXPECTED, invoke_linear, runtime
from test_mme_bad_input import one_step

from conch.builder.repository_build import build_ensemble
from conch.endpoint import LocalMME

pytestmark = pytest.mark.integration
WAIT_S = 180.0  # generous: the machine is shared; nothing here asserts how long anything took


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("restart-src")
    for name in ("ra", "rb"):
        build_ensemble(linear_ensemble(name), folder, "local")
    build_ensemble(one_step("slowload", basic_steps.SlowSetup), folder, "local")  # loads for 60 s
    build_ensemble(one_step("slowcall", restart_steps.sleepy), folder, "local")  # answers after 60 s
    return folder


def wait_for(what: str, check: Any) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"waited {WAIT_S:g} s for {what}")
        time.sleep(0.1)


def kill_server(mme: LocalMME) -> None:
    assert mme.triton.process is not None
    os.kill(mme.triton.process.pid, signal.SIGKILL)


def test_a_killed_server_is_restarted_and_every_model_loads_again(source: Path) -> None:
    with LocalMME(source) as mme:
        rt = runtime(mme.url)
        for name in ("ra.tar.gz", "rb.tar.gz"):
            np.testing.assert_array_equal(invoke_linear(rt, name), EXPECTED)
        caught: dict[str, ClientError] = {}

        def invoke(name: str) -> None:  # still under way in Triton when the server dies
            try:
                invoke_linear(runtime(mme.url), name)
            except ClientError as exc:
                caught[name] = exc

        callers = [threading.Thread(target=invoke, args=(name,)) for name in ("slowcall.tar.gz", "slowload.tar.gz")]
        callers[0].start()
        wait_for("the slow call to be answering", lambda: "Invoking SageMaker TargetModel: slowcall.tar.gz"
                 in mme.triton.log_path.read_text(errors="replace"))
        callers[1].start()
        wait_for("the slow load to start", lambda: "Loading SageMaker TargetModel: slowload.tar.gz"
                 in mme.triton.log_path.read_text(errors="replace"))
        kill_server(mme)
        for caller in callers:
            caller.join(WAIT_S)
        wait_for("/ping to answer 200 again", lambda: httpx.get(f"{mme.url}/ping").status_code == 200)
        for name in ("ra.tar.gz", "rb.tar.gz"):
            np.testing.assert_array_equal(invoke_linear(rt, name), EXPECTED)
        metrics = mme.metrics_json()
        log = mme.triton.log_path.read_text(errors="replace")
    assert sorted(caught) == ["slowcall.tar.gz", "slowload.tar.gz"], log  # an invocation and a load, both cut short
    for name, exc in caught.items():
        error = exc.response["Error"]
        assert error["Code"] == "ModelError", log
        assert f"'{name}'" in error["Message"] and "tritonserver exited" in error["Message"], log
        assert "restarts it" in error["Message"]
    assert metrics["TritonRestarts"] == 1
    assert metrics["ModelLoads"] == {"cold": 3, "reload": 2} and metrics["LoadedModelCount"] == 2
    assert "Loading SageMaker TargetModel: slowload.tar.gz" in log  # the dead server's log is kept


def test_past_max_restarts_every_call_says_the_server_is_gone(source: Path) -> None:
    with LocalMME(source, max_restarts=0) as mme:
        rt = runtime(mme.url)
        np.testing.assert_array_equal(invoke_linear(rt, "ra.tar.gz"), EXPECTED)
        kill_server(mme)
        wait_for("the endpoint to give up", lambda: not mme.serving())
        assert httpx.get(f"{mme.url}/ping").status_code == 503
        with pytest.raises(ClientError) as gone:
            invoke_linear(rt, "ra.tar.gz")
        metrics = mme.metrics_json()
    message = gone.value.response["Error"]["Message"]
    assert "'ra.tar.gz'" in message and "was not restarted" in message and "--max-restarts 0" in message
    assert metrics["TritonRestarts"] == 0
