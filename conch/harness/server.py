"""The local tritonserver from the nvidia-pytriton wheel, started as a subprocess on 127.0.0.1.

It runs the way SageMaker's serve script runs Triton for a multi-model endpoint (SageMaker front end,
explicit model control, an empty dummy repository, ``SAGEMAKER_MULTI_MODEL=true``, ``--model-namespacing``
from 23.04), plus the KServe HTTP endpoint for direct checks. Its process group is killed on exit, also on
Ctrl-C or failure, and the kernel kills the server when the thread that started it dies, even by SIGKILL:
Triton 2.51's SageMaker port listens on every interface and must never outlive conch.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType

import httpx

from conch.backends.standins.standin_bridge import HOST_PYTHON_ENV
from conch.cache import cached_file
from conch.errors import ServeError
from conch.harness import shm_regions
from conch.harness.http_client import sync_client
from conch.harness.stub_python import StubPython, stub_python
from conch.scratch import die_with_parent, scratch_dir
from conch.triton_wheel import pytriton_paths

STARTUP_TIMEOUT_S = 60.0
START_ATTEMPTS = 3  # free_port() hands out a port that another process may take before the server binds it
NAMESPACING_FROM = "23.04"  # SageMaker's serve script passes --model-namespacing=true from this release on


def python_backend_dir(python_version: str | None = None) -> Path:
    """A backends folder whose python/ holds the Python backend and the stub for this Python version (default:
    conch's own).

    Built once in conch's cache (never inside the installed wheel)."""
    version = python_version or f"{sys.version_info.major}.{sys.version_info.minor}"
    server_dir, _ = pytriton_paths()
    stub = server_dir / "python_backend_stubs" / version / "triton_python_backend_stub"
    if not stub.is_file():
        raise ServeError(f"nvidia-pytriton has no Python-backend stub for Python {version}")
    backend = server_dir / "backends" / "python"
    sources = [backend / n for n in ("libtriton_python.so", "triton_python_backend_utils.py")]
    key = hashlib.sha256(b"".join(f"{p}:{p.stat().st_size}:{p.stat().st_mtime_ns}".encode() for p in [stub, *sources]))

    def copy_backend(stub_path: Path) -> None:
        stub_path.parent.mkdir(parents=True)
        for src in [*sources, stub]:
            shutil.copy2(src, stub_path.parent / src.name)

    # built in a temp folder beside it in the cache and published whole (conch.cache.cached_file)
    published = cached_file("triton-backends", f"py{version}-{key.hexdigest()[:12]}",
                            "python/triton_python_backend_stub", copy_backend)
    return published.parent.parent


def free_port() -> int:
    """A port free on 127.0.0.1 now; it may be taken before it is bound again, so starts retry."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def namespacing_for(release: str) -> bool:
    """Whether the SageMaker image of ``release`` runs Triton with ``--model-namespacing=true``."""
    from conch.ensembles.target import Release

    return not Release.of(release) < Release.of(NAMESPACING_FROM)


def bind_failed(log: str) -> bool:
    """Whether a server that exited at start did so because one of its ports was taken."""
    return any(s in log for s in ("already in use", "failed to start", "same address and port"))


class LocalTriton:
    """A tritonserver subprocess with the SageMaker MME front end and the KServe HTTP endpoint.

    Use as a context manager; ``stop()`` kills the whole process group (server and Python stubs).
    """

    def __init__(
        self,
        workdir: Path | None = None,
        *,
        log_verbose: int = 0,
        startup_timeout: float = STARTUP_TIMEOUT_S,
        model_namespacing: bool = False,
        extra_args: tuple[str, ...] = (),
        shm_default_byte_size: int = 16 * 1024 * 1024,  # SageMaker's Triton image, unless its env says otherwise
        shm_growth_byte_size: int = 1024 * 1024,
        stub: StubPython | None = None,
        auto_complete: bool = True,
    ) -> None:
        """``stub``: the Python its Python-backend stubs run on (default: the default release's, found when the
        server starts); ``auto_complete=False`` passes ``--disable-auto-complete-config``, which SageMaker's serve
        script does not (an opt-in for speed, never the default)."""
        self._own_workdir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="conch-triton-", dir=scratch_dir()))
        self.log_verbose = log_verbose
        self.startup_timeout = startup_timeout
        self.model_namespacing = model_namespacing
        self.extra_args = extra_args
        self.shm = (shm_default_byte_size, shm_growth_byte_size)
        self._stub = stub
        self.auto_complete = auto_complete
        self.process: subprocess.Popen[bytes] | None = None
        self.http_port = self.grpc_port = self.sagemaker_port = 0
        self.log_path = self.workdir / "tritonserver.log"
        self.shm_prefix = shm_regions.new_prefix()
        self._log_mode = "wb"  # a restart appends, so the log of the server that died stays

    @classmethod
    def sized_for(cls, archives: Iterable[Path], strict: bool | None = None) -> LocalTriton:
        """A server whose Python backend shared memory holds these archives, as `conch deploy` sizes it on
        SageMaker (silently: the build warned about production), and whose stubs run their releases' Python
        (``strict``, default in CI or after --strict: a ServeError where that Python is not found)."""
        from conch.builder.shm_sizing import archives_settings
        from conch.harness.stub_python import releases_of, strict_default

        archives = list(archives)
        default, growth = archives_settings(archives)
        stub = stub_python(releases_of(archives), strict=strict_default() if strict is None else strict)
        return cls(shm_default_byte_size=default, shm_growth_byte_size=growth, stub=stub)

    @property
    def stub(self) -> StubPython:
        """The Python this server's stubs run on (found, and its environment built, on first use)."""
        if self._stub is None:
            from conch.harness.stub_python import strict_default

            self._stub = stub_python(strict=strict_default())
        return self._stub

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def sagemaker_url(self) -> str:
        return f"http://127.0.0.1:{self.sagemaker_port}"

    def command(self) -> list[str]:
        server_dir, _ = pytriton_paths()
        repo = self.workdir / "empty-repository"  # SageMaker MME passes a dummy repository too
        repo.mkdir(parents=True, exist_ok=True)
        return [
            str(server_dir / "bin" / "tritonserver"),
            f"--model-repository={repo}",
            f"--backend-directory={python_backend_dir(self.stub.version)}",
            "--model-control-mode=explicit",
            "--allow-sagemaker=true",
            f"--sagemaker-port={self.sagemaker_port}",
            "--allow-http=true",
            "--http-address=127.0.0.1",
            f"--http-port={self.http_port}",
            "--allow-grpc=true",
            "--grpc-address=127.0.0.1",
            f"--grpc-port={self.grpc_port}",
            "--allow-metrics=false",
            *(() if self.auto_complete else ("--disable-auto-complete-config",)),
            f"--model-namespacing={'true' if self.model_namespacing else 'false'}",
            f"--log-verbose={self.log_verbose}",
            "--exit-timeout-secs=5",
            f"--backend-config=python,shm-default-byte-size={self.shm[0]}",
            f"--backend-config=python,shm-growth-byte-size={self.shm[1]}",
            f"--backend-config=python,shm-region-prefix-name={self.shm_prefix}",
            *self.extra_args,
        ]

    def environment(self) -> dict[str, str]:
        _, libs = pytriton_paths()
        env = dict(os.environ)
        stub = self.stub
        # The stub links its Python's libpython, which an interpreter outside the system's folders (pyenv, uv, a
        # conda env) keeps in its own LIBDIR: searched last, after the user's own entries, which it must not shadow.
        parts = (str(libs), env.get("LD_LIBRARY_PATH", ""), str(stub.interpreter.libdir))
        env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in parts if p)
        # The stub takes sys.prefix from the `python3` on PATH: a venv of the release's Python holding what the
        # image's Python holds, so a step sees the image's packages and its own environment's, not conch's.
        env["PATH"] = os.pathsep.join([str(stub.environment / "bin"), env.get("PATH", "")])
        env.pop("VIRTUAL_ENV", None)
        # A GPU-less stand-in (an ONNX, TorchScript, TensorFlow or DALI step run on the CPU) runs its framework
        # in conch's own Python, which has it: the image's Python has not (conch/backends/standins/standin_bridge.py).
        env[HOST_PYTHON_ENV] = sys.executable
        env["SAGEMAKER_MULTI_MODEL"] = "true"
        # coverage.py's documented subprocess measurement would start in every stub (~0.15 s of CPU each, and a data
        # file to combine), and a stub runs only the archive's own files: a coverage run stops at conch's processes.
        for name in ("COVERAGE_PROCESS_CONFIG", "COVERAGE_PROCESS_START"):
            env.pop(name, None)
        return env

    def start(self) -> LocalTriton:
        """Start and wait until both endpoints answer; retry with new ports when a port was taken meanwhile.

        The server is killed when the calling thread ends (PR_SET_PDEATHSIG): start it from a thread that
        lives as long as the server should."""
        if self.process is not None:
            return self
        shm_regions.sweep_orphans()  # what servers of killed conch processes left in /dev/shm
        for attempt in range(1, START_ATTEMPTS + 1):
            self.http_port, self.grpc_port, self.sagemaker_port = free_port(), free_port(), free_port()
            self.workdir.mkdir(parents=True, exist_ok=True)
            with self.log_path.open(self._log_mode) as log:
                self.process = subprocess.Popen(
                    self.command(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    env=self.environment(), cwd=self.workdir, start_new_session=True, preexec_fn=die_with_parent,
                )
            try:
                self._wait_ready()
                return self
            except ServeError:
                exited = self.process is not None and self.process.poll() is not None
                log_text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
                self._kill()
                if not (exited and bind_failed(log_text)) or attempt == START_ATTEMPTS:
                    self._cleanup()
                    raise
            except BaseException:
                self.stop()
                raise
        raise AssertionError("unreachable")  # the loop returns or raises

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        with sync_client(self.http_url, self.sagemaker_url, timeout=1) as http:
            while time.monotonic() < deadline:
                assert self.process is not None
                if self.process.poll() is not None:
                    raise ServeError(f"tritonserver exited with code {self.process.returncode} at start\n"
                                     f"{self.log_tail()}")
                with contextlib.suppress(httpx.HTTPError):
                    live = http.get(f"{self.http_url}/v2/health/live").status_code == 200
                    ping = http.get(f"{self.sagemaker_url}/ping").status_code == 200
                    if live and ping:
                        return
                time.sleep(0.05)
        raise ServeError(f"tritonserver was not ready within {self.startup_timeout:.0f} s\n{self.log_tail()}")

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def exit_status(self) -> str:
        """How the server ended, e.g. ``was killed by SIGSEGV`` (empty while it runs)."""
        code = self.process.poll() if self.process is not None else None
        if code is None:
            return ""
        if code < 0:
            with contextlib.suppress(ValueError):
                return f"was killed by {signal.Signals(-code).name}"
        return f"exited with code {code}"

    def restart(self) -> LocalTriton:
        """Start again after the server exited, on new ports; what the old one left (stubs, shared-memory
        regions) is removed first and its log is kept (the new server appends to it). The new server dies
        with the calling thread, as in ``start()``."""
        self._kill()
        shm_regions.remove(self.shm_prefix)
        self._log_mode = "ab"
        return self.start()

    def stop(self) -> None:
        """Terminate the server and everything it started; escalate to SIGKILL after a grace period."""
        self._kill()
        self._cleanup()

    def _cleanup(self) -> None:
        shm_regions.remove(self.shm_prefix)  # stubs killed by SIGKILL leave their regions behind
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def _kill(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # stubs that outlived the server
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=5)

    def log_tail(self, lines: int = 60) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no server log)"
        noise = ("CUDA", "cuda", "DCGM", "GPU metrics", "Unable to allocate pinned", "pinned memory", "NVML")
        kept = [ln for ln in text if not any(n in ln for n in noise)]
        return "--- tritonserver log (last lines) ---\n" + "\n".join(kept[-lines:])

    def __enter__(self) -> LocalTriton:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
