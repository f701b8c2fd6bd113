"""The front's answers leave in one write: uvicorn's head and body writes gathered (same bytes, same order),
flushed when uvicorn completes the answer, before a close, or at the end of the loop's turn."""

from __future__ import annotations

import asyncio
from typing import Any

from conch.harness.endpoint.single_write import Gathered


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
