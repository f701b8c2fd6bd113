"""Shared fixtures: small declared ensembles, one real tritonserver and one moto server per test session.

The session uses a cache folder of its own (``$CONCH_CACHE_DIR``), set here before anything imports
conch's cache and inherited by the CLI subprocesses; it is never the user's ``~/.cache/conch``. Set
``CONCH_TEST_CACHE_DIR`` to keep one folder warm across sessions (exported models, packed envs)."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

_SESSION_CACHE = "_CONCH_TEST_SESSION_CACHE"  # set once per session: this file is executed twice (see sagemaker/)
if os.environ.get(_SESSION_CACHE) is None or os.environ.get(_SESSION_CACHE) != os.environ.get("CONCH_CACHE_DIR"):
    _kept = os.environ.get("CONCH_TEST_CACHE_DIR")
    os.environ["CONCH_CACHE_DIR"] = _kept or tempfile.mkdtemp(prefix="conch-test-cache-")
    os.environ[_SESSION_CACHE] = os.environ["CONCH_CACHE_DIR"]

FIXTURES = Path(__file__).parent / "fixtures"
if str(FIXTURES) not in sys.path:
    sys.path.insert(0, str(FIXTURES))

import basic_steps  # noqa: E402
import error_raises  # noqa: E402

from conch import Ensemble, PythonStep, Tensor  # noqa: E402


def pytest_unconfigure(config: pytest.Config) -> None:
    if not os.environ.get("CONCH_TEST_CACHE_DIR"):
        shutil.rmtree(os.environ[_SESSION_CACHE], ignore_errors=True)


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    """After coverage's report: every user-facing error raise in conch/ and whether a test triggered it."""
    error_raises.terminal_summary(terminalreporter, config)


def linear_ensemble(name: str = "linear", max_batch_size: int = 8) -> Ensemble:
    """X -> double -> add_one -> Z, with one sample."""
    ens = Ensemble(name, max_batch_size=max_batch_size)
    x = ens.input("X", "FP32", [4])
    dbl = PythonStep("double", basic_steps.double, [Tensor("x", "FP32", [4])], [Tensor("y", "FP32", [4])],
                     max_batch_size=max_batch_size)
    add = PythonStep("add_one", basic_steps.add_one, [Tensor("y", "FP32", [4])], [Tensor("z", "FP32", [4])],
                     max_batch_size=max_batch_size)
    ens.output("Z", add(dbl(x)))
    data = np.arange(8, dtype=np.float32).reshape(2, 4)
    ens.sample("two rows", {"X": data}, {"Z": data * 2 + 1})
    return ens


def half_ensemble(name: str = "halves") -> Ensemble:
    """X (FP16) -> twice -> Y (FP16), with one sample: tensors Triton's JSON bodies cannot carry."""
    ens = Ensemble(name, max_batch_size=4)
    step = PythonStep("twice", basic_steps.twice_half, [Tensor("x", "FP16", [4])], [Tensor("y", "FP16", [4])],
                      max_batch_size=4)
    ens.output("Y", step(ens.input("X", "FP16", [4])))
    x = np.ones((2, 4), np.float16)
    ens.sample("ones", {"X": x}, {"Y": x * 2})
    return ens


@pytest.fixture
def linear() -> Ensemble:
    return linear_ensemble()


@pytest.fixture(scope="session")
def triton() -> Iterator[object]:
    """One real tritonserver (SageMaker MME front end + KServe HTTP) for the integration tests."""
    from conch.harness.server import LocalTriton

    server = LocalTriton()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def moto_server() -> Iterator[str]:
    """moto's S3/SageMaker-compatible server on a free port of 127.0.0.1 for the whole session."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()
