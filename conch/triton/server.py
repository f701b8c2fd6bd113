"""The local tritonserver from the nvidia-pytriton wheel, started as a subprocess reached on 127.0.0.1.

It runs the way SageMaker's serve script runs Triton for a multi-model endpoint (SageMaker front end,
explicit model control, an empty dummy repository, ``SAGEMAKER_MULTI_MODEL=true``, ``--model-namespacing``
from 23.04), plus the KServe HTTP endpoint for direct checks. Its process group is killed on exit, also on
Ctrl-C or failure, and the kernel kills the server when the thread that started it dies, even by SIGKILL.

What listens where: Triton 2.51's SageMaker port listens on every interface (it has no address flag), so the
server runs in a user and network namespace of its own (conch.triton.network_namespace), whose only
interface is its loopback; conch binds its HTTP, gRPC and SageMaker ports on the host's 127.0.0.1 (ports the
kernel picks, no race) and the launcher in the namespace passes each connection on to the same port there.
Mount and IPC namespaces stay the host's: the Python stubs share /dev/shm with the server and conch. Where the
platform refuses user namespaces the server runs on the host, its SageMaker port open to the network: conch
says so once and counts it (``exposed_starts``), unless ``--allow-exposed-triton`` says the user accepts it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
import psutil

from conch.backends.standins.standin_bridge import HOST_PYTHON_ENV
from conch.cache import cached_file
from conch.errors import ServeError, ServerExited
from conch.scratch import die_with_parent, scratch_dir
from conch.triton import network_namespace, shm_regions
from conch.triton.http_client import sync_client
from conch.triton.stub_python import StubPython, stub_python
from conch.triton_wheel import pytriton_paths

STARTUP_TIMEOUT_S = 60.0
KEPT_LOGS = 20  # the logs of servers that died, kept in <cache>/server-logs: the newest this many
KEPT_LOG_BYTES = 1024 * 1024  # the end of each such log (a --log-verbose log grows without bound)
START_ATTEMPTS = 3  # without a namespace, a port conch picked and let go may be taken before the server binds it
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


def exit_words(code: int) -> str:
    """A Popen exit code in a message's words: ``signal 11`` (negative: the signal that ended it) or ``code 1``."""
    return f"signal {-code}" if code < 0 else f"code {code}"


def signal_cause(code: int) -> str:
    """What a signal that ended tritonserver usually means, for the message that names it."""
    causes = {signal.SIGKILL: "SIGKILL: killed from outside, e.g. by the kernel's out-of-memory killer",
              signal.SIGSEGV: "SIGSEGV: a crash in Triton or a backend (Triton 2.51 crashes in some load/unload races, "
                              "docs/testing.md)",
              signal.SIGABRT: "SIGABRT: Triton or a backend aborted"}
    with contextlib.suppress(ValueError):
        sig = signal.Signals(-code)
        return causes.get(sig, sig.name)
    return ""


def keep_log(log: Path, name: str) -> Path | None:
    """Copy the end of a dead server's log to ``<cache>/server-logs/<name>`` (its workdir is removed when conch
    stops it), keeping the newest ``KEPT_LOGS`` there; None when there is no log to keep."""
    from conch.cache import cache_dir

    try:
        with log.open("rb") as source:
            source.seek(max(0, log.stat().st_size - KEPT_LOG_BYTES))
            text = source.read()
    except OSError:
        return None
    folder = cache_dir() / "server-logs"
    folder.mkdir(parents=True, exist_ok=True)
    kept = folder / name
    tmp = kept.with_name(f".{name}.{os.getpid()}")
    tmp.write_bytes(text)
    tmp.replace(kept)
    older = sorted((p for p in folder.glob("*.log") if p != kept), key=lambda p: p.stat().st_mtime)
    for stale in older[:max(0, len(older) + 1 - KEPT_LOGS)]:
        stale.unlink(missing_ok=True)
    return kept


def _stubs_follow(triton: LocalTriton, process: subprocess.Popen[bytes]) -> None:
    """Wait for the server to exit (without reaping it), then kill what it started, unless ``triton`` is stopping
    or restarting it (those kill the group themselves, once its stubs have finished). Its Python stubs inherit the
    server's open connections, so a call in flight would otherwise wait out its whole timeout instead of seeing
    the server gone.

    The group is killed even when another thread has reaped the server meanwhile (``exit_code()`` polls it): the
    group's id stays taken while a stub lives, and Linux hands out a freed process id again only after its
    counter has gone round ``pid_max``, so the signal cannot reach another program's group."""
    try:
        handle = os.pidfd_open(process.pid)
    except OSError:  # the process is gone already (reaped by stop())
        return
    try:
        select.select([handle], [], [])
    finally:
        os.close(handle)
    if triton.process is process:  # it died on its own
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)


STUB = "triton_python_backend_stub"
EXIT_TIMEOUT_S = 5  # tritonserver's --exit-timeout-secs: how long it waits for requests, connections and unloads
STOP_POLL_S = 0.02


def _wait_for_stubs(process: subprocess.Popen[bytes], timeout: float) -> None:
    """Wait until the server, asked to stop (SIGTERM), has exited or has let every Python stub finish (each runs
    its model's ``finalize`` when the server unloads it), at most ``timeout`` s. Past that point the server only
    waits for its once-a-second check of live models (core server.cc) to see none: seconds per stop that
    nothing needs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            process.wait(timeout=STOP_POLL_S)
            return
        except subprocess.TimeoutExpired:
            pass
        try:
            left = [c for c in psutil.Process(process.pid).children(recursive=True) if c.name().startswith(STUB[:15])]
        except psutil.Error:  # the server, or a stub being listed, has just exited: look again
            continue
        if not left:
            return


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
        # ports of listeners that extra_args opens (e.g. --metrics-port), reached on the host's 127.0.0.1 too
        self.extra_ports: tuple[int, ...] = ()
        self.exposed_starts = 0  # starts without a network namespace: the SageMaker port open to the network
        self.log_path = self.workdir / "tritonserver.log"
        self.shm_prefix = shm_regions.new_prefix()
        self._log_mode = "wb"  # a restart appends, so the log of the server that died stays
        self._served = False  # the server answered once: a death from now on is kept (not a failed start)
        self._kept: dict[int, Path | None] = {}  # pid of a server that died -> where its log was kept
        self._clients: weakref.WeakSet[Any] = weakref.WeakSet()  # conch's clients of it: closed before it stops

    @classmethod
    def sized_for(cls, archives: Iterable[Path], strict: bool | None = None) -> LocalTriton:
        """A server whose Python backend shared memory holds these archives, as `conch deploy` sizes it on
        SageMaker (silently: the build warned about production), and whose stubs run their releases' Python
        (``strict``, default in CI or after --strict: a ServeError where that Python is not found)."""
        from conch.builder.shm_sizing import archives_settings
        from conch.triton.stub_python import releases_of, strict_default

        archives = list(archives)
        default, growth = archives_settings(archives)
        stub = stub_python(releases_of(archives), strict=strict_default() if strict is None else strict)
        return cls(shm_default_byte_size=default, shm_growth_byte_size=growth, stub=stub)

    @property
    def stub(self) -> StubPython:
        """The Python this server's stubs run on (found, and its environment built, on first use)."""
        if self._stub is None:
            from conch.triton.stub_python import strict_default

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
            f"--exit-timeout-secs={EXIT_TIMEOUT_S}",
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
        """Start and wait until both endpoints answer; without a network namespace, retry with new ports when a
        port was taken meanwhile.

        The server is killed when the calling thread ends (PR_SET_PDEATHSIG): start it from a thread that
        lives as long as the server should."""
        if self.process is not None:
            return self
        shm_regions.sweep_orphans()  # what servers of killed conch processes left in /dev/shm
        refused = network_namespace.refused()
        unshare = network_namespace.unshare_command()
        for attempt in range(1, START_ATTEMPTS + 1):
            self.workdir.mkdir(parents=True, exist_ok=True)
            with contextlib.ExitStack() as listeners, self.log_path.open(self._log_mode) as log:
                try:
                    sockets = self._listeners(listeners)
                except ServeError:
                    self._cleanup()
                    raise
                if refused or unshare is None:  # on the host: its ports must be free again when it binds them
                    listeners.close()
                    self.exposed_starts += 1
                    network_namespace.warn_exposed(self.sagemaker_port, refused)
                    command, fds = self.command(), tuple[int, ...]()
                else:  # its namespace's ports are all free: it binds the same numbers there
                    command = network_namespace.launcher_command(unshare, sockets, self.command())
                    fds = tuple(s.fileno() for s in sockets)
                self.process = subprocess.Popen(
                    command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, pass_fds=fds,
                    env=self.environment(), cwd=self.workdir, start_new_session=True, preexec_fn=die_with_parent,
                )  # the listeners close here: the launcher holds them, so they close when it ends
            try:
                self._wait_ready()
                self._served = True
                threading.Thread(target=_stubs_follow, args=(self, self.process), name="conch-triton-exit",
                                 daemon=True).start()
                return self
            except ServeError:
                exited = self.exit_code() is not None
                log_text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
                self._kill()
                if not (exited and bind_failed(log_text)) or attempt == START_ATTEMPTS:
                    self._cleanup()
                    raise
            except BaseException:
                self.stop()
                raise
        raise AssertionError("unreachable")  # the loop returns or raises

    def _listeners(self, stack: contextlib.ExitStack) -> list[socket.socket]:
        """Listening sockets on the host's 127.0.0.1 for the HTTP, gRPC and SageMaker ports (new ones each
        start) and ``extra_ports``; their numbers become the server's ports."""
        try:
            sockets = [stack.enter_context(network_namespace.loopback_listener(port))
                       for port in (0, 0, 0, *self.extra_ports)]
        except OSError as exc:
            raise ServeError(f"could not listen on 127.0.0.1 for tritonserver's ports {self.extra_ports}: {exc}"
                             ) from None
        self.http_port, self.grpc_port, self.sagemaker_port = (int(s.getsockname()[1]) for s in sockets[:3])
        return sockets

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        with sync_client(self.http_url, self.sagemaker_url, timeout=1) as http:
            while time.monotonic() < deadline:
                code = self.exit_code()
                if code is not None:
                    raise ServeError(f"tritonserver exited with code {code} at start\n{self.log_tail()}")
                with contextlib.suppress(httpx.HTTPError):
                    live = http.get(f"{self.http_url}/v2/health/live").status_code == 200
                    ping = http.get(f"{self.sagemaker_url}/ping").status_code == 200
                    if live and ping:
                        return
                time.sleep(0.05)
        raise ServeError(f"tritonserver was not ready within {self.startup_timeout:.0f} s\n{self.log_tail()}")

    def exit_code(self) -> int | None:
        """The server's exit code as Popen gives it (negative: the signal that ended it); None while it runs or
        before it started. Every check of the server's life reads it here, so a launcher started in its place
        reports the server's own status through this one method."""
        return self.process.poll() if self.process is not None else None

    def running(self) -> bool:
        return self.process is not None and self.exit_code() is None

    def exit_status(self) -> str:
        """How the server ended, e.g. ``was killed by SIGSEGV`` (empty while it runs)."""
        code = self.exit_code()
        if code is None:
            return ""
        if code < 0:
            with contextlib.suppress(ValueError):
                return f"was killed by {signal.Signals(-code).name}"
        return f"exited with code {code}"

    def lost(self, doing: str, wait: float = 0.0) -> ServerExited | None:
        """The error that names the server's death while ``doing`` (e.g. ``unloading 'a.tar.gz'``): how it
        exited, the cause a signal usually has, where its log is kept, and the log's last lines; None while it
        runs. ``wait``: seconds a server that is dying (a connection was just dropped) may take to be seen
        exited."""
        if self.process is None:
            return None
        deadline = time.monotonic() + wait
        while (code := self.exit_code()) is None:
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.05)
        kept = self.keep_log()
        cause = signal_cause(code)
        where = f"its log is kept in {kept}" if kept is not None else "it left no log"
        return ServerExited(f"tritonserver exited ({exit_words(code)}) while {doing}"
                            f"{f' ({cause})' if cause else ''}; {where}\n{self.log_tail(25)}", code, kept)

    def keep_log(self) -> Path | None:
        """Keep the log of a server that exited (once per server process) where its workdir's removal does not
        take it: ``<cache>/server-logs``. Where it was kept, or None."""
        process = self.process
        if process is None or self.exit_code() is None:
            return None
        if process.pid not in self._kept:
            stamp = time.strftime("%Y%m%d-%H%M%S")
            self._kept[process.pid] = keep_log(self.log_path, f"tritonserver-{stamp}-{process.pid}.log")
        return self._kept[process.pid]

    def attach(self, client: Any) -> None:
        """A client of this server (its ``close()`` ends its connections), closed before the server stops:
        tritonserver waits up to its exit timeout for open HTTP connections before it unloads its models, each
        stub's ``finalize`` then unrun (core http_server.cc)."""
        self._clients.add(client)

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
        if self._served:
            self.keep_log()  # one that died on its own after it served: its log outlives the workdir
        process, self.process, self._served = self.process, None, False
        if process is None:
            return
        for client in list(self._clients):  # a kept-alive connection holds a stopping server for its exit timeout
            client.close()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        _wait_for_stubs(process, timeout=EXIT_TIMEOUT_S + 1)  # past its own timeout, a server is stuck (a hung load)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # the server once its stubs finished, or stubs that outlived it
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
