"""The local tritonserver: starts on loopback, stops with everything it started, reports its log."""

from __future__ import annotations

import itertools
import os
import socket
import time
from pathlib import Path

import httpx
import pytest

from conch import ServeError
from conch.triton import network_namespace
from conch.triton.server import LocalTriton, namespacing_for, python_backend_dir

pytestmark = pytest.mark.integration


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


def test_backend_folder_is_built_outside_the_wheel() -> None:
    folder = python_backend_dir()
    assert (folder / "python" / "libtriton_python.so").is_file()
    assert (folder / "python" / "triton_python_backend_stub").is_file()
    assert "site-packages" not in str(folder)


def test_backend_folder_is_built_in_a_fresh_cache_without_the_system_temp_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the first run on a machine: built beside its place in the cache and moved in whole, never through the
    # system temp folder (another file system there made the move fail and the folder never appear)
    import tempfile

    monkeypatch.setenv("CONCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no-such-temp-folder"))
    folder = python_backend_dir()
    assert folder.parent == tmp_path / "cache" / "triton-backends"
    assert (folder / "python" / "triton_python_backend_stub").is_file()
    assert (folder / "python" / "libtriton_python.so").is_file()
    assert [p.name for p in folder.parent.iterdir()] == [folder.name]  # no temp folder left beside it
    assert python_backend_dir() == folder


def test_start_answers_on_both_endpoints_then_stop_kills_the_group(tmp_path: Path) -> None:
    server = LocalTriton(tmp_path / "w")
    with server:
        assert httpx.get(f"{server.http_url}/v2/health/ready", timeout=5).status_code == 200
        assert httpx.get(f"{server.sagemaker_url}/ping", timeout=5).status_code == 200
        assert httpx.get(f"{server.sagemaker_url}/models", timeout=5).json() == {"models": []}
        assert server.http_url.startswith("http://127.0.0.1:")
        assert server.process is not None
        pid = server.process.pid
    deadline = time.monotonic() + 10
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(pid)
    assert not server.running()


def test_a_server_that_cannot_start_reports_its_log(tmp_path: Path) -> None:
    server = LocalTriton(tmp_path / "w", extra_args=("--no-such-flag",), startup_timeout=20)
    with pytest.raises(ServeError, match="tritonserver exited with code"):
        server.start()
    assert not server.running()


def test_a_port_taken_between_choosing_and_binding_it_is_retried(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # only where tritonserver runs on the host (no network namespace): it binds ports conch chose and let go
    monkeypatch.setenv(network_namespace.UNSHARE_ENV, "/nonexistent/unshare")
    monkeypatch.setenv(network_namespace.ALLOW_EXPOSED_ENV, "1")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        calls = itertools.count()
        listener = network_namespace.loopback_listener
        monkeypatch.setattr(network_namespace, "loopback_listener",  # its first pick: a port another process holds
                            lambda port=0: taken.dup() if next(calls) == 0 else listener(port))
        with LocalTriton(tmp_path / "w", startup_timeout=30) as server:
            assert server.http_port != taken.getsockname()[1]
            assert httpx.get(f"{server.http_url}/v2/health/ready", timeout=5).status_code == 200
        assert next(calls) > 3  # a second start


def test_namespacing_follows_the_sagemaker_image_of_the_release() -> None:
    assert not namespacing_for("23.03")
    assert namespacing_for("23.04") and namespacing_for("24.10")


def test_a_python_without_a_stub_in_the_wheel_is_named() -> None:
    with pytest.raises(ServeError, match=r"nvidia-pytriton has no Python-backend stub for Python 3.14"):
        python_backend_dir("3.14")


def test_a_server_not_ready_in_time_is_stopped_and_reported(tmp_path: Path) -> None:
    server = LocalTriton(tmp_path / "w", startup_timeout=0)
    with pytest.raises(ServeError, match=r"tritonserver was not ready within 0 s"):
        server.start()
    assert not server.running()


FINALIZING = '''import numpy as np
from pathlib import Path

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("Y", np.ones(1, np.float32))]) for _ in requests]

    def finalize(self):
        (Path(__file__).parent / "finalized").write_text("yes")
'''


def finalizing_repository(tmp_path: Path) -> Path:
    """A repository with one Python model, ``fin``, whose finalize writes ``fin/1/finalized``."""
    repository = tmp_path / "repository"
    (repository / "fin" / "1").mkdir(parents=True)
    (repository / "fin" / "config.pbtxt").write_text(
        'backend: "python"\nmax_batch_size: 0\ninput [{ name: "X" data_type: TYPE_FP32 dims: [1] }]\n'
        'output [{ name: "Y" data_type: TYPE_FP32 dims: [1] }]\n')
    (repository / "fin" / "1" / "model.py").write_text(FINALIZING)
    return repository


@pytest.mark.integration
def test_stop_lets_each_stub_finalize_and_does_not_wait_out_the_exit_timeout(tmp_path: Path) -> None:
    """stop() asks the server to stop and waits for its stubs, each of which runs its model's finalize as the server
    unloads it; a client that closed its connections does not hold the server for its exit timeout."""
    from conch.triton.mme import MultiModelClient

    repository = finalizing_repository(tmp_path)
    triton = LocalTriton(workdir=tmp_path / "server")  # a workdir of the caller's: its log stays
    with triton, MultiModelClient(triton.sagemaker_url, triton.http_url, server=triton) as client:
        client.load("fin", repository, 120)
    assert (repository / "fin" / "1" / "finalized").read_text() == "yes"
    log = triton.log_path.read_text()
    assert "Exit timeout expired" not in log, log[-2000:]  # the server was killed once its stub had finished


@pytest.mark.integration
def test_a_client_left_open_is_closed_by_the_stop(tmp_path: Path) -> None:
    """A MultiModelClient made with server= and never closed (replay's, the plugin's) does not hold the stopping
    server for its exit timeout: the stop closes it, and the model's finalize still runs."""
    from conch.triton.mme import MultiModelClient

    repository = finalizing_repository(tmp_path)
    triton = LocalTriton(workdir=tmp_path / "server")
    with triton:
        client = MultiModelClient(triton.sagemaker_url, triton.http_url, server=triton)
        client.load("fin", repository, 120)  # its kept-alive connection stays open into the stop
    assert (repository / "fin" / "1" / "finalized").read_text() == "yes"
    assert "Exit timeout expired" not in triton.log_path.read_text()
    assert client.http.is_closed
