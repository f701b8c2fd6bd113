"""LocalMME: a tritonserver run as SageMaker's image runs it, and the front on uvicorn in a thread of its own."""

from __future__ import annotations

import asyncio
import logging
import re
import shutil
import tempfile
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import psutil
import uvicorn

from conch.endpoint.app import create_app
from conch.endpoint.disk import DiskCache
from conch.endpoint.fleet import Budgets, Fleet
from conch.endpoint.hop import INVOKE_TIMEOUT_S, TritonHop
from conch.endpoint.metrics import Metrics, run_counts
from conch.endpoint.sources import open_source
from conch.endpoint.step_names import StepNames
from conch.ensembles.target import DEFAULT_RELEASE
from conch.errors import ServeError
from conch.scratch import scratch_dir
from conch.triton.http_client import sync_client
from conch.triton.server import LocalTriton, namespacing_for
from conch.triton.stub_python import strict_default, stub_python

ENDPOINT_NAME = "local"
ENDPOINT_NAME_PATTERN = re.compile(r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}")  # CreateEndpoint's EndpointName
LOAD_WAIT_S = 60.0  # SageMaker: ModelNotReadyException when the model is not loaded within the 60 s of a call
DEFAULT_LOAD_TIMEOUT_S = 300.0
DEFAULT_MAX_RESTARTS = 5
FRONT_START_TIMEOUT_S = 30.0
WATCH_INTERVAL_S = 0.2  # how often the watcher looks whether tritonserver still runs
FLEET_CALL_TIMEOUT_S = 60.0
KEEP_ALIVE_S = 30  # uvicorn closes a caller's connection idle this long after an answer

log = logging.getLogger("conch.endpoint")


def tree_pss(pid: int) -> int:
    """Bytes of proportional set size of ``pid`` and its descendants (0 if it is gone): the memory a local MME's
    models cost, tritonserver and every process it started (its Python stubs), pages shared between stubs
    counted once across them."""
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for process in processes:
        try:
            total += process.memory_full_info().pss
        except psutil.Error:  # a stub that exited meanwhile, or a process we may not read
            continue
    return total


class LocalMME:
    """Many archives behind one local endpoint, served as a SageMaker multi-model endpoint serves them.

    Args:
        source: a folder of ``.tar.gz`` archives or ``s3://bucket/prefix``; TargetModel = key under it.
        max_loaded: at most this many TargetModels loaded at once (least recently used unloaded first).
        memory_budget: bytes of PSS (tritonserver + its Python stubs) that loading may not pass.
        disk_budget: bytes of unpacked archives kept; files of unloaded models go first.
        cache_dir: where archives are unpacked (default: a temp folder removed at stop).
        s3_endpoint_url: an S3-compatible server for ``s3://`` sources (e.g. moto on 127.0.0.1).
        load_timeout: seconds a load may take before the TargetModel answers with an error.
        release: the Triton release whose SageMaker image is emulated (``--model-namespacing`` from 23.04).
        step_names: ``shared`` (default) keeps every name as uploaded, as SageMaker's image does; a TargetModel
            whose step models another TargetModel uses is a collision (one warning, ``StepNameCollisions``).
            ``isolate`` renames a TargetModel's step models when another TargetModel already uses their names:
            what ``conch deploy`` uploads (stamped copies).
        max_restarts: how many times tritonserver is started again after it exits (segfault, kill); each
            restart is counted (``TritonRestarts``), and bench fails a run that had one.
        endpoint_name: the EndpointName calls must use (others get SageMaker's ValidationError).
        invocation_timeout: seconds an invocation is answered within (SageMaker: 60); past them, SageMaker's
            timeout ModelError.
        load_wait: seconds an invocation waits for its TargetModel's download and load (SageMaker: 60); past
            them it gets ModelNotReadyException (429) and the load goes on.
        retry_lookup: ask Triton once more when it answers "unknown model" for a loaded TargetModel (a race in
            Triton; SageMaker passes the answer on). Retries are counted (``TritonLookupRetries``).

    tritonserver is killed when the thread that called ``start()`` ends (so that it never outlives conch,
    even on SIGKILL): start the endpoint from a thread that lives as long as it should. A restarted server
    belongs to the endpoint's watcher thread, which lives until ``stop()``.
    """

    def __init__(
        self,
        source: str | Path,
        *,
        max_loaded: int | None = None,
        memory_budget: int | None = None,
        disk_budget: int | None = None,
        cache_dir: Path | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        s3_endpoint_url: str | None = None,
        load_timeout: float = DEFAULT_LOAD_TIMEOUT_S,
        release: str = DEFAULT_RELEASE,
        step_names: StepNames | str = StepNames.SHARED,
        max_restarts: int = DEFAULT_MAX_RESTARTS,
        endpoint_name: str = ENDPOINT_NAME,
        invocation_timeout: float = INVOKE_TIMEOUT_S,
        load_wait: float = LOAD_WAIT_S,
        retry_lookup: bool = False,
    ) -> None:
        if max_loaded is not None and max_loaded < 1:
            raise ServeError(f"max_loaded {max_loaded}: at least one model must fit")
        if max_restarts < 0:
            raise ServeError(f"max_restarts {max_restarts}: give 0 (never restart tritonserver) or more")
        try:
            self.step_names = StepNames(step_names)
        except ValueError:
            choices = " or ".join(repr(s.value) for s in StepNames)
            raise ServeError(f"step_names {step_names!r}: choose {choices}") from None
        if not ENDPOINT_NAME_PATTERN.fullmatch(endpoint_name):
            raise ServeError(f"endpoint name {endpoint_name!r}: SageMaker takes 1 to 63 letters, digits and hyphens, "
                             "starting with a letter or digit, e.g. 'my-endpoint'")
        for what, value in (("invocation_timeout", invocation_timeout), ("load_wait", load_wait)):
            if not value > 0:
                raise ServeError(f"{what} {value:g}: give a number of seconds above 0 (SageMaker's is 60)")
        self.max_restarts, self.endpoint_name, self.retry_lookup = max_restarts, endpoint_name, retry_lookup
        self.source = open_source(source, s3_endpoint_url)
        self.budgets = Budgets(max_loaded, memory_budget, disk_budget, load_timeout, invocation_timeout, load_wait)
        self.host, self.port = host, port
        self._own_cache = cache_dir is None
        self.cache_dir = Path(cache_dir or tempfile.mkdtemp(prefix="conch-mme-", dir=scratch_dir()))
        # the stubs run the release's image Python (a ServeError under --strict or CI where it is not found)
        self.triton = LocalTriton(model_namespacing=namespacing_for(release),
                                  stub=stub_python([release], strict=strict_default()))
        self.metrics = Metrics()
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._fleet: Fleet | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping = threading.Event()
        self._watcher: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> LocalMME:
        self.triton.start()
        try:
            self._start_front()
        except BaseException:
            self.stop()
            raise
        self._stopping.clear()
        self._watcher = threading.Thread(target=self._watch, name="conch-mme-watcher", daemon=True)
        self._watcher.start()
        return self

    def serving(self) -> bool:
        """Whether the endpoint serves, or will again once tritonserver has restarted: its watcher ends only in
        ``stop()`` or when it gives up, after the fleet knows (so calls then say the server is gone)."""
        watcher = self._watcher
        return self._server is not None and watcher is not None and watcher.is_alive()

    def _watch(self) -> None:
        """Restart tritonserver when it exits, at most ``max_restarts`` times; tell the fleet before and after."""
        restarts = 0
        while not self._stopping.wait(WATCH_INTERVAL_S):
            if self.triton.running():
                continue
            why = self.triton.exit_status() or "exited"
            self._tell_fleet("server_lost", why)
            while not self._stopping.is_set():
                if restarts >= self.max_restarts:
                    log.error("tritonserver %s; not restarted: it was restarted %d times already (max_restarts); its "
                              "log: %s", why, restarts, self.triton.log_path)
                    self._tell_fleet("server_gone", f"{why} and was not restarted: it was restarted "
                                     f"{restarts} times already (--max-restarts {self.max_restarts}); its log: "
                                     f"{self.triton.log_path}")
                    return
                restarts += 1
                self.metrics.restarts.inc()
                log.error("tritonserver %s; restarting it (%d of at most %d); every TargetModel counts as unloaded and "
                          "loads again on its next call; its log: %s", why, restarts, self.max_restarts,
                          self.triton.log_path)
                try:
                    self.triton.restart()
                except Exception as exc:  # the watcher must live on: a server it started dies with it
                    why = f"did not restart ({exc})"
                    continue
                self._tell_fleet("server_back", self.triton.sagemaker_url)
                break

    def _tell_fleet(self, what: str, arg: str) -> None:
        """Run ``fleet.<what>(arg)`` on the front's loop. Never raises: the watcher thread must live on, since a
        server it restarted dies with it."""
        fleet, loop = self._fleet, self._loop
        if fleet is None or loop is None or loop.is_closed():
            return
        try:
            asyncio.run_coroutine_threadsafe(getattr(fleet, what)(arg), loop).result(FLEET_CALL_TIMEOUT_S)
        except Exception:
            log.exception("the endpoint's fleet.%s(%r) failed", what, arg)

    def _start_front(self) -> None:
        triton, metrics, disk = self.triton, self.metrics, DiskCache(self.cache_dir / "models")

        def memory() -> int:  # the server's pid changes when it restarts
            process = triton.process
            return tree_pss(process.pid) if process is not None else 0

        baseline = memory()
        for gauge, value in ((metrics.max_loaded, self.budgets.max_loaded), (metrics.memory_budget,
                             self.budgets.memory), (metrics.disk_budget, self.budgets.disk)):
            gauge.set(value or 0)

        def make_fleet() -> Fleet:
            hop = TritonHop(triton.sagemaker_url, triton.log_path)
            fleet = Fleet(self.source, disk, hop, metrics, self.budgets,
                          memory, step_names=self.step_names, server_alive=triton.running,
                          retry_lookup=self.retry_lookup)
            fleet.baseline_memory = baseline
            self._fleet, self._loop = fleet, asyncio.get_running_loop()
            return fleet

        def refresh() -> None:
            metrics.memory.set(memory())

        app = create_app(self.endpoint_name, make_fleet, refresh, triton.running)
        # uvicorn's documented options only: its C parser (httptools) and uvloop when they are installed ("auto"),
        # keep-alive closed after 30 s idle; no X-Forwarded-For rewriting per request (callers reach the front
        # directly, as SageMaker's runtime); no "server: uvicorn" header (SageMaker's answers carry none); the Date
        # header stays (SageMaker's answers carry one). log_config=None: uvicorn's default runs
        # logging.config.dictConfig, which closes every logging handler of the process (absl's closes the stream it
        # holds); its loggers go to the process's logging instead
        self._server, self._thread, self.port = start_front(app, self.host, self.port, "the local MME front",
                                                            "conch-mme-front")

    def stop(self) -> None:
        self._stopping.set()
        if self._watcher is not None:
            self._watcher.join(timeout=FLEET_CALL_TIMEOUT_S + 30)  # a restart under way finishes first
            self._watcher = None
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=30)
        self._server = self._thread = None
        self.triton.stop()
        if self._own_cache:
            shutil.rmtree(self.cache_dir, ignore_errors=True)

    def load(self, target_model: str, timeout: float | None = None) -> None:
        """Download and load ``target_model`` now, as its first invocation would (it then counts as used)."""
        if self._fleet is None or self._loop is None:
            raise ServeError("the local MME is not running: use it as a context manager or call start()")
        fleet = self._fleet

        async def load() -> None:
            await fleet.release(await fleet.acquire(target_model))

        asyncio.run_coroutine_threadsafe(load(), self._loop).result(timeout or self.budgets.load_timeout + 60)

    def metrics_json(self) -> dict[str, Any]:
        """The same numbers as ``GET /metrics.json``."""
        with sync_client(self.url, timeout=30) as http:
            response = http.get(f"{self.url}/metrics.json")
        response.raise_for_status()
        result: dict[str, Any] = response.json()
        return result

    def counts(self) -> dict[str, Any]:
        """Since start: restarts, lookup misses and retries, step name collisions, 429s and timeouts, and the
        step-name mode (``metrics.run_counts``); and the tritonserver starts without a network namespace of their
        own (their SageMaker port open on every interface)."""
        counts = run_counts(None, {**self.metrics.snapshot(), "step_names": self.step_names.value})
        return {**counts, "exposed_starts": self.triton.exposed_starts}

    def python_note(self) -> str:
        """Empty when the stubs run the release's image Python; else what the summary says ("ran on 3.11; ...")."""
        return self.triton.stub.note

    def ready_line(self) -> dict[str, Any]:
        """What ``conch serve --mme`` prints when ready: where to call, and where everything else is."""
        return {
            "url": self.url, "endpoint_name": self.endpoint_name, "port": self.port,
            "invocations": f"{self.url}/endpoints/{self.endpoint_name}/invocations",
            "metrics": f"{self.url}/metrics", "source": self.source.describe(), "step_names": self.step_names.value,
            "invocation_timeout_s": self.budgets.invocation_timeout, "load_wait_s": self.budgets.load_wait,
            "retry_lookup": self.retry_lookup,
            "python": self.triton.stub.describe(),  # the stub's Python, and "ran on 3.11; ..." when not the image's
            "triton": {"sagemaker_port": self.triton.sagemaker_port, "http_port": self.triton.http_port,
                       "grpc_port": self.triton.grpc_port, "log": str(self.triton.log_path)},
        }

    def __enter__(self) -> LocalMME:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


logging.getLogger("conch.endpoint").addHandler(logging.NullHandler())


def start_front(app: Any, host: str, port: int, what: str, thread_name: str,
                ) -> tuple[uvicorn.Server, threading.Thread, int]:
    """Serve ``app`` on uvicorn in a thread of its own, as SageMaker's front answers (see the options above);
    return the server, its thread and the port it bound (``port`` 0: the kernel's pick). ServeError naming
    ``what`` when it does not start."""
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False,
                            lifespan="on", timeout_keep_alive=KEEP_ALIVE_S, proxy_headers=False,
                            server_header=False, http="auto", loop="auto", log_config=None)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name=thread_name, daemon=True)
    thread.start()
    deadline = time.monotonic() + FRONT_START_TIMEOUT_S
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise ServeError(f"{what} did not start on {host}:{port} (port taken?)")
        time.sleep(0.02)
    return server, thread, int(server.servers[0].sockets[0].getsockname()[1])
