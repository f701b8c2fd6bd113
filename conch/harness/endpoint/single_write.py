"""uvicorn's httptools protocol with each answer written to the socket in one piece.

uvicorn writes an answer's head and its body with two ``transport.write`` calls, which uvloop sends as two
``write`` syscalls: two segments on the wire, and a caller woken for a head without its body. Here the writes of
one answer are gathered and sent when uvicorn marks the answer complete (or at the end of the loop's turn, for a
write nothing completes, e.g. ``100 Continue``), as one ``writev`` (the body not copied). Same bytes, in the same
order; one syscall per answer. uvicorn's keep-alive timeout after each answer is held on one loop timer shared
by every connection (``deadlines.py``), not a timer made per answer.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from conch.harness.endpoint.deadlines import Deadlines


class Gathered:
    """A transport whose writes are held until ``flush`` (called by the protocol, by ``close``, or by the loop at
    the end of the turn); everything else goes to the real transport."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: list[bytes | bytearray | memoryview] = []
        # what uvicorn calls on every request, bound once (not looked up through __getattr__ each time)
        self.is_closing = transport.is_closing
        self.get_extra_info = transport.get_extra_info
        self.pause_reading = transport.pause_reading
        self.resume_reading = transport.resume_reading

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self._held:
            self._loop.call_soon(self.flush)
        self._held.append(data)

    def flush(self) -> None:
        held = self._held
        if not held:
            return
        self._held = []
        if self._transport.is_closing():
            return  # the caller went away: what asyncio's write drops too
        if len(held) == 1:
            self._transport.write(held[0])
        else:
            self._transport.writelines(held)  # one writev under uvloop: the body is not copied

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:  # set_protocol, get_write_buffer_size...
        return getattr(self._transport, name)


class KeptAliveProtocol(HttpToolsProtocol):
    """uvicorn's ``httptools`` protocol whose keep-alive timeouts share one loop timer (``Deadlines``) instead of a
    timer made after every answer and cancelled when the next request arrives; a connection idle
    ``timeout_keep_alive`` seconds after an answer is closed, as in uvicorn (``uvicorn.Config(http=...)``)."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.keep_alive = _keep_alive(self.loop)
        super().connection_made(transport)  # type: ignore[arg-type]

    def connection_lost(self, exc: Exception | None) -> None:
        self.keep_alive.discard(self)
        super().connection_lost(exc)

    def _unset_keepalive_if_required(self) -> None:  # uvicorn's: on new bytes, and when the connection ends
        self.keep_alive.discard(self)
        if self.timeout_keep_alive_task is not None:  # a timer of uvicorn's own (after a pipelined answer)
            super()._unset_keepalive_if_required()

    def on_response_complete(self) -> None:
        if self.pipeline or self.transport.is_closing():
            super().on_response_complete()  # uvicorn's own: start the next pipelined request, or nothing to keep
            return
        # uvicorn's on_response_complete, with the keep-alive timeout held in the shared timer (``add`` replaces one
        # already held for this connection, as uvicorn's unset-then-set does)
        self.server_state.total_requests += 1
        if self.timeout_keep_alive_task is not None:
            super()._unset_keepalive_if_required()
        self.flow.resume_reading()
        self.keep_alive.add(self, self.loop.time() + self.timeout_keep_alive, self.timeout_keep_alive_handler)


class SingleWriteProtocol(KeptAliveProtocol):
    """``KeptAliveProtocol`` on a ``Gathered`` transport: each answer in one write."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        gathered = Gathered(transport, self.loop)  # type: ignore[arg-type]
        self.gathered = gathered
        super().connection_made(gathered)  # type: ignore[arg-type]

    def on_response_complete(self) -> None:
        self.gathered.flush()
        super().on_response_complete()


_KEEP_ALIVE: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Deadlines] = weakref.WeakKeyDictionary()


def _keep_alive(loop: asyncio.AbstractEventLoop) -> Deadlines:
    """The keep-alive deadlines of every connection served on ``loop``."""
    deadlines = _KEEP_ALIVE.get(loop)
    if deadlines is None:
        # a Deadlines holds its loop, so the weak key alone never lets an entry go: closed loops are dropped here
        for closed in [held for held in _KEEP_ALIVE if held.is_closed()]:
            del _KEEP_ALIVE[closed]
        deadlines = _KEEP_ALIVE[loop] = Deadlines(loop)
    return deadlines
