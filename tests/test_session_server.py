"""The suite's session tritonserver (tests/conftest.py ``triton``) contains a death: an inner pytest session
whose second test kills it with SIGKILL fails that test naming the signal, and the tests after it pass on the
server started again."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).parent

# The inner session's conftest: the suite's own fixture and hook, from tests/conftest.py.
CONFTEST = f"""
import importlib.util
import sys

sys.path.insert(0, {str(TESTS)!r})
_spec = importlib.util.spec_from_file_location("suite_conftest", {str(TESTS / "conftest.py")!r})
_suite = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_suite)
triton = _suite.triton
pytest_runtest_makereport = _suite.pytest_runtest_makereport
"""

INNER = """
import os
import signal

from conch.triton.mme import MultiModelClient


def answers(triton):
    client = MultiModelClient(triton.sagemaker_url, triton.http_url, server=triton)
    return client.describe("never_loaded.tar.gz") is None


def test_before(triton):
    assert answers(triton)


def test_killed(triton):
    os.kill(triton.process.pid, signal.SIGKILL)
    MultiModelClient(triton.sagemaker_url, triton.http_url).describe("never_loaded.tar.gz")


def test_after(triton):
    assert answers(triton)


def test_after_again(triton):
    assert answers(triton)
"""


@pytest.mark.integration
def test_a_killed_session_server_fails_the_test_that_ran_and_is_restarted_for_the_next(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_inner.py").write_text(INNER)
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "--disable-plugin-autoload", "-p", "no:cacheprovider", "-q", "-rf",
         "test_inner.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600, env={**os.environ, "COLUMNS": "400"},
    )
    out = ran.stdout + ran.stderr
    assert ran.returncode == 1, out
    assert "1 failed, 3 passed" in out, out
    assert "FAILED test_inner.py::test_killed - the session's tritonserver exited (signal 9) while " \
           "test_inner.py::test_killed ran (call) (SIGKILL" in out, out
    assert "its log is kept in " in out, out
