"""LocalComponents: a local endpoint hosting each archive as an inference component, one tritonserver per copy,
its front on uvicorn in a thread of its own (as the local MME's)."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import psutil
import uvicorn

from conch.endpoint.component_app import create_component_app
from conch.endpoint.components import (
    COPY_START_TIMEOUT_S,
    Component,
    ComponentMetrics,
    Copy,
    refuse_unfit,
)
from conch.endpoint.hop import INVOKE_TIMEOUT_S
from conch.endpoint.local import ENDPOINT_NAME, ENDPOINT_NAME_PATTERN, start_front
from conch.errors import ServeError
from conch.triton.http_client import sync_client
from conch.wire import component_name

DEFAULT_MEMORY_MB = 1024  # a copy's reservation when none is given (the deploy's assumed figure)


class LocalComponents:
    """Archives behind one local endpoint, each an inference component.

    Args:
        archives: the ``.tar.gz`` archives; component ``<endpoint_name>-<archive stem>`` each, as deployed.
        memory_mb: per component name (or archive name), what one copy reserves (default ``DEFAULT_MEMORY_MB``).
        copies: per component name, the copies it starts with (default 1; 0: scaled to zero).
        instance_memory_mb: the instance's memory the reservations must fit (default: this machine's).
    """

    def __init__(self, archives: Sequence[Path], *, endpoint_name: str = ENDPOINT_NAME,
                 memory_mb: Mapping[str, int] | None = None, copies: Mapping[str, int] | None = None,
                 instance_memory_mb: int | None = None, host: str = "127.0.0.1", port: int = 0,
                 invocation_timeout: float = INVOKE_TIMEOUT_S) -> None:
        if not ENDPOINT_NAME_PATTERN.fullmatch(endpoint_name):
            raise ServeError(f"endpoint name {endpoint_name!r}: SageMaker takes 1 to 63 letters, digits and hyphens")
        if not archives:
            raise ServeError("nothing to serve: give .tar.gz archives (or folders of them) with --components")
        self.endpoint_name, self.host, self.port = endpoint_name, host, port
        self.invocation_timeout = invocation_timeout
        self.instance_memory_mb = instance_memory_mb or psutil.virtual_memory().total // 2**20
        memory, wanted = dict(memory_mb or {}), dict(copies or {})
        self.components: dict[str, Component] = {}
        for archive in archives:
            name = component_name(endpoint_name, archive.name)
            if name in self.components:
                raise ServeError(f"two archives make the component {name!r}: rename one")
            mb = memory.get(name, memory.get(archive.name, DEFAULT_MEMORY_MB))
            self.components[name] = Component(name, archive, mb)
        unknown = set(wanted) - set(self.components)
        if unknown:
            raise ServeError(f"copies given for {', '.join(sorted(unknown))}: no such component (the components are "
                             f"{', '.join(self.components)})")
        self.initial = {name: wanted.get(name, 1) for name in self.components}
        self.metrics = ComponentMetrics()
        self._lock = threading.Lock()
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, wait: float = COPY_START_TIMEOUT_S) -> LocalComponents:
        """Create every component (refused when its copies do not fit), start their copies and the front; wait
        until the copies are up."""
        try:
            for name, count in self.initial.items():
                self.scale(name, count)
            self._start_front()
            self.wait_copies(wait)
        except BaseException:
            self.stop()
            raise
        return self

    def scale(self, name: str, count: int) -> None:
        """Set the component's copy count: new copies start in threads of their own (the call returns at once),
        copies past ``count`` stop. Refused when the copies would not fit the instance's memory."""
        with self._lock:
            component = self.components.get(name)
            if component is None:
                raise ServeError(f"no inference component {name!r} (the components are {', '.join(self.components)})")
            if count < 0:
                raise ServeError(f"inference component {name!r}: {count} copies; give 0 or more")
            refuse_unfit(self.components, self.instance_memory_mb, name, count)
            component.desired = count
            live = [c for c in component.copies if c.failed is None]
            for copy in live[count:]:
                copy.stop()
            component.copies = live[:count]
            while len(component.copies) < count:
                component.copies.append(Copy(component.archive, self._update_gauges).start())
            self._update_gauges()

    def _update_gauges(self) -> None:
        for name, component in self.components.items():
            self.metrics.copies.labels(name).set(len(component.serving()))
            self.metrics.desired.labels(name).set(component.desired)

    def wait_copies(self, timeout: float = COPY_START_TIMEOUT_S) -> None:
        """Until every copy asked for has started; ServeError naming a copy that could not."""
        deadline = time.monotonic() + timeout
        for component in self.components.values():
            for copy in list(component.copies):
                if not copy.ready.wait(max(deadline - time.monotonic(), 0)):
                    raise ServeError(f"a copy of {component.name} did not start within {timeout:g} s; its log: "
                                     f"{copy.triton.log_path}")
                if copy.failed is not None:
                    raise ServeError(f"a copy of {component.name} did not start: {copy.failed}")

    def _start_front(self) -> None:
        app = create_component_app(self.endpoint_name, self.components, self.metrics, self.scale,
                                   self.invocation_timeout)
        self._server, self._thread, self.port = start_front(app, self.host, self.port,
                                                            "the local endpoint's front", "conch-components-front")

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=30)
        self._server = self._thread = None
        copies = [copy for component in self.components.values() for copy in component.copies]
        for copy in copies:
            copy.stop()
        for copy in copies:
            copy.join()

    def metrics_json(self) -> dict[str, Any]:
        """The same numbers as ``GET /metrics.json``."""
        with sync_client(self.url, timeout=30) as http:
            response = http.get(f"{self.url}/metrics.json")
        response.raise_for_status()
        found: dict[str, Any] = response.json()
        return found

    def __enter__(self) -> LocalComponents:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()
