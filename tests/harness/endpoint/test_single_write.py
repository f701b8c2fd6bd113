"""The front's answers leave in one write: uvicorn's head and body writes gathered (same bytes, same order),
flushed when uvicorn completes the answer, before a close, or at the end of the loop's turn; uvicorn's keep-alive
timeout still closes an idle connection on time."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from typing import Any

import pytest
import uvicorn

from conch.harness.endpoint.single_write import Gathered, KeptAliveProtocol, SingleWriteProtocol


class Recording:
    """A transport that records what reaches the socket, one entry per write call."""

    def __init__(self) -> None:
        self.sent: list[list[bytes]] = []
        self.closing = False

    def write(self, data: bytes) -> None:
        self.sent.append([data])

    def writelines(self, pieces: list[bytes]) -> None:
        self.sent.append(list(pieces))

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def get_extra_info(self, name: str) -> Any:
        return f"info:{name}"

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 7


def test_an_answers_writes_reach_the_socket_as_one_call_in_order() -> None:
    async def main() -> None:
        transport = Recording()
        gathered = Gathered(transport, asyncio.get_running_loop())  # type: ignore[arg-type]
        gathered.write(b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\n")
        gathered.write(b"body")
        assert transport.sent == []  # held until the answer is complete
        gathered.flush()
        assert transport.sent == [[b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\n", b"body"]]
        await asyncio.sleep(0)  # the end-of-turn flush finds nothing left
        assert len(transport.sent) == 1
        assert gathered.get_extra_info("peername") == "info:peername"  # the rest is the real transport's
        assert gathered.get_write_buffer_size() == 7

    asyncio.run(main())


def test_a_write_nothing_completes_goes_out_at_the_end_of_the_turn() -> None:
    async def main() -> None:
        transport = Recording()
        gathered = Gathered(transport, asyncio.get_running_loop())  # type: ignore[arg-type]
        gathered.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        await asyncio.sleep(0)
        assert transport.sent == [[b"HTTP/1.1 100 Continue\r\n\r\n"]]

    asyncio.run(main())


def test_a_close_sends_what_is_held_first_and_a_closed_socket_gets_nothing() -> None:
    async def main() -> None:
        transport = Recording()
        gathered = Gathered(transport, asyncio.get_running_loop())  # type: ignore[arg-type]
        gathered.write(b"HTTP/1.1 400 Bad Request\r\n\r\n")
        gathered.close()
        assert transport.sent == [[b"HTTP/1.1 400 Bad Request\r\n\r\n"]] and transport.closing
        gathered.write(b"late")
        await asyncio.sleep(0)
        assert len(transport.sent) == 1  # the caller went away: dropped, as asyncio drops it

    asyncio.run(main())


@pytest.mark.parametrize("protocol", [KeptAliveProtocol, SingleWriteProtocol])
@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_an_idle_kept_connection_is_closed_after_the_keep_alive_timeout_and_a_busy_one_is_not(
        loop: str, protocol: type[KeptAliveProtocol]) -> None:
    """uvicorn's keep-alive through the shared timer: a connection is closed ``timeout_keep_alive`` seconds after
    its last answer when nothing more arrived, not before; a new request in time keeps it open for another period."""
    keep = 0.3

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    config = uvicorn.Config(app, host="127.0.0.1", port=0, loop=loop, http=protocol, lifespan="off",
                            log_level="warning", access_log=False, timeout_keep_alive=keep, log_config=None)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        while not server.started:
            time.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]

        def ask(sock: socket.socket) -> float:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            answer = b""
            while not answer.endswith(b"\r\n\r\nok"):
                answer += sock.recv(4096)
            return time.monotonic()

        def closed_after(sock: socket.socket, since: float) -> float:
            assert sock.recv(4096) == b""  # EOF: the server closed it
            return time.monotonic() - since

        idle, busy = socket.create_connection(("127.0.0.1", port)), socket.create_connection(("127.0.0.1", port))
        with idle, busy:
            for sock in (idle, busy):
                sock.settimeout(keep * 5)  # a connection never closed fails the test instead of hanging it
            answered = ask(idle)
            ask(busy)
            time.sleep(keep * 2 / 3)
            again = ask(busy)  # within the timeout: kept for another period from this answer
            assert keep - 0.01 <= closed_after(idle, answered) < keep + 0.25
            assert keep - 0.01 <= closed_after(busy, again) < keep + 0.25
    finally:
        server.should_exit = True
        thread.join(10)


def test_the_keep_alive_timers_of_a_closed_loop_are_not_kept() -> None:
    """Each local MME runs its front on a loop of its own: a process that starts many keeps no closed loop."""
    from conch.harness.endpoint import single_write

    first, second = asyncio.new_event_loop(), asyncio.new_event_loop()
    try:
        single_write._keep_alive(first)
        first.close()
        single_write._keep_alive(second)
        assert first not in single_write._KEEP_ALIVE and second in single_write._KEEP_ALIVE
    finally:
        second.close()
