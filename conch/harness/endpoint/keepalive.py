"""The invocation hop's kept-alive HTTP/1.1 connections to Triton's SageMaker front end: an asyncio Protocol per
connection whose answers httptools' ``HttpResponseParser`` (llhttp, the parser uvicorn and aiohttp use) reads and
frames (Content-Length, chunked, keep-alive), and the pool that lends them out.

A request is sent at most once on a connection. A call moves to another connection only when the one it took was
seen closed or readable (EOF, a reset, stray bytes) *before* anything was written on it: nothing of the request
reached Triton, so sending it elsewhere is what the caller's own retry would do, and it is counted (``resent``). A
connection that drops after the request was written fails the call (``RemoteProtocolError``), never resent.
"""

from __future__ import annotations

import asyncio
import select
from collections import deque
from collections.abc import Callable
from typing import cast

import httptools
import httpx

from conch.harness.endpoint.deadlines import Deadlines
from conch.wire import MAX_BODY_BYTES

OPEN = 64  # connections to Triton at once; more calls wait for one
IDLE_S = 30.0  # a kept connection idle this long is closed when next seen
CLOSED_BEFORE = "the connection closed before an answer"
SHUT = "the connections to this tritonserver were closed (it exited or is being restarted) before a free one came"


class AnswerTooLarge(httpx.HTTPError):
    """Triton's answer passed the size SageMaker passes on (``MAX_BODY_BYTES``); ``size``: what it said or sent."""

    def __init__(self, size: int, declared: bool, status: int, limit: int) -> None:
        how = "of" if declared else "past"
        super().__init__(f"HTTP {status} with a body {how} {size} bytes (at most {limit} pass)")
        self.size, self.status = size, status


class _Stop(Exception):
    """Raised in a parser callback to end parsing (the call already failed)."""


class Connection(asyncio.Protocol):
    """One kept-alive connection: at most one call in flight; the answer's status, Content-Type and body."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.poller: select.poll | None = None
        self.waiter: asyncio.Future[tuple[int, bytes, str]] | None = None
        self.closed = False
        self.idle_since = 0.0
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self.content_type = ""
        self.chunks: list[bytes] = []
        self.size = 0
        self.head_done = False
        self.framed = False  # Content-Length or chunked: an EOF before the end cuts the answer short
        self.started = False  # a byte of the answer arrived

    # -- asyncio.Protocol -----------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is one without being a subclass
        poll = getattr(select, "poll", None)
        if poll is not None:
            self.poller = poll()
            self.poller.register(transport.get_extra_info("socket").fileno(), select.POLLIN)

    def data_received(self, data: bytes) -> None:
        if self.waiter is None:  # bytes nobody asked for: the connection is no longer in step
            self.close()
            return
        self.started = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            if self.waiter is not None:
                self._fail(httpx.RemoteProtocolError(f"Triton's answer is not valid HTTP/1.1: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            if self.head_done and not self.framed:  # the answer's body ends with the connection
                self._answer()
            elif self.started:
                waiter.set_exception(httpx.RemoteProtocolError(
                    f"the connection closed in the middle of an answer (HTTP {self.status or '?'}, {self.size} bytes "
                    "of its body read)"))
            else:
                why = f": {exc}" if exc is not None else ""
                waiter.set_exception(httpx.RemoteProtocolError(f"{CLOSED_BEFORE}{why}"))
        self.waiter = self.poller = None
        self.pool.lost(self)

    # -- httptools callbacks ---------------------------------------------------------------------------------
    def on_message_begin(self) -> None:
        if self.waiter is None:  # a second answer after ours, in the same bytes
            self.close()
            raise _Stop

    def on_header(self, name: bytes, value: bytes) -> None:
        key = name.lower()
        if key == b"content-type":
            self.content_type = value.decode("latin-1")
        elif key == b"content-length":
            self.framed = True
            if value.isdigit() and int(value) > self.pool.limit:
                self._fail(AnswerTooLarge(int(value), True, self.parser.get_status_code(), self.pool.limit))
                raise _Stop
        elif key == b"transfer-encoding" and b"chunked" in value.lower():
            self.framed = True

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self.head_done = True

    def on_body(self, body: bytes) -> None:
        self.size += len(body)
        if self.size > self.pool.limit:
            self._fail(AnswerTooLarge(self.size, False, self.status, self.pool.limit))
            raise _Stop
        self.chunks.append(body)

    def on_message_complete(self) -> None:
        if self.status < 200:  # an interim answer (100 Continue): the real one follows
            self._reset()
            self.started = True
            return
        keep = self.parser.should_keep_alive()
        self._answer()
        if not keep:
            self.close()

    # -- the call ------------------------------------------------------------------------------------------
    def _answer(self) -> None:
        waiter, chunks = self.waiter, self.chunks
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        if waiter is not None and not waiter.done():
            waiter.set_result((self.status, body, self.content_type))
        self.waiter = None
        self._reset()

    def _fail(self, exc: BaseException) -> None:
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)
        self.close()

    def clean(self) -> bool:
        """Whether a kept connection can take a request: not closed, and nothing to read (no EOF, reset or stray
        bytes waiting in the kernel that the loop has not handled yet)."""
        if self.closed or self.transport is None or self.transport.is_closing():
            return False
        return self.poller is None or not self.poller.poll(0)

    def send(self, data: bytes, body: bytes) -> asyncio.Future[tuple[int, bytes, str]]:
        """Write one request (``data``: its head, or head and body; ``body``: the body if not in ``data``)."""
        assert self.transport is not None
        waiter = self.waiter = self.pool.loop.create_future()
        self._reset()
        if body:
            self.transport.writelines((data, body))  # the body as it came, not copied into one buffer
        else:
            self.transport.write(data)
        return waiter

    def timed_out(self) -> None:
        self._fail(asyncio.TimeoutError())

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class Pool:
    """Kept-alive connections to one host: lent to one call at a time, the most recently used first."""

    def __init__(self, host: str, port: int, resent: Callable[[], object], limit: int = MAX_BODY_BYTES) -> None:
        self.host, self.port, self.resent, self.limit = host, port, resent, limit
        self.loop = asyncio.get_running_loop()
        self.deadlines = Deadlines(self.loop)  # the calls' timeouts (``TritonHop.invoke``)
        self.idle: list[Connection] = []
        self.every: set[Connection] = set()
        self.waiting: deque[asyncio.Future[Connection | None]] = deque()
        self.shut = False

    async def take(self, deadline: float) -> tuple[Connection, bool]:
        """A connection that can take a request, and whether it is a kept one. Connections seen closed or
        readable before the write are dropped; the call goes on another one (counted once per call: ``resent``)."""
        conn, kept, dropped = await self._take(deadline)
        if dropped:
            self.resent()
        return conn, kept

    async def _take(self, deadline: float) -> tuple[Connection, bool, bool]:
        """``take``'s connection, whether it is a kept one, and whether a kept one was dropped first."""
        idle = self.idle
        dropped = False
        while True:
            if self.shut:  # closed for a restarted tritonserver: its old port is nobody's to call now
                raise httpx.ConnectError(SHUT)
            while idle:
                conn = idle.pop()
                if conn.clean():
                    if self.loop.time() - conn.idle_since <= IDLE_S:
                        return conn, True, dropped
                    conn.close()  # ours to close: idle too long, nothing tried on it
                    continue
                conn.close()
                dropped = True
            if len(self.every) < OPEN:
                return await self._connect(deadline), False, dropped
            waiter: asyncio.Future[Connection | None] = self.loop.create_future()
            self.waiting.append(waiter)
            try:
                conn_or_none = await asyncio.wait_for(waiter, max(deadline - self.loop.time(), 0.001))
            except BaseException:
                if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                    handed = waiter.result()
                    if handed is not None:
                        self.give(handed)
                raise
            if conn_or_none is not None:
                if conn_or_none.clean():
                    return conn_or_none, True, dropped
                conn_or_none.close()
                dropped = True

    async def _connect(self, deadline: float) -> Connection:
        conn = Connection(self)
        self.every.add(conn)
        try:
            await asyncio.wait_for(self.loop.create_connection(lambda: conn, self.host, self.port),
                                   max(deadline - self.loop.time(), 0.001))
        except OSError as exc:
            self.every.discard(conn)
            raise httpx.ConnectError(f"Cannot connect to host {self.host}:{self.port}: {exc}") from exc
        except BaseException:
            self.every.discard(conn)
            raise
        return conn

    def give(self, conn: Connection) -> None:
        """A connection back after a whole answer: to a waiting call, or kept."""
        if conn.closed or self.shut:
            conn.close()
            return
        while self.waiting:
            waiter = self.waiting.popleft()
            if not waiter.done():
                waiter.set_result(conn)
                return
        now = self.loop.time()
        conn.idle_since = now
        idle = self.idle
        if idle and now - idle[0].idle_since > IDLE_S:  # the least recently used one, idle too long
            idle.pop(0).close()
        idle.append(conn)

    def lost(self, conn: Connection) -> None:
        """A connection ended (either side closed it): a waiting call may open a new one."""
        self.every.discard(conn)
        if conn in self.idle:
            self.idle.remove(conn)
        while self.waiting:
            waiter = self.waiting.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def close(self) -> None:
        self.shut = True
        self.deadlines.close()  # the calls under way fail as their connections close
        for conn in list(self.every):
            conn.close()
        self.idle.clear()
        while self.waiting:  # the calls waiting for a connection fail now (SHUT), not on a new one to the old port
            waiter = self.waiting.popleft()
            if not waiter.done():
                waiter.set_result(None)

