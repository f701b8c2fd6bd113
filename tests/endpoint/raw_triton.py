"""A raw HTTP/1.1 server on loopback standing in for Triton's SageMaker front end, for the hop's tests: it reads
each request (head and Content-Length body) on a connection and sends what the test's ``respond`` returns,
byte for byte, so a test can send answers no real server would (cut short, not HTTP, closed at any moment)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from conch.endpoint.hop import TritonHop

# (request head, request body, connection number) -> the bytes to send (None: close without a word), and
# whether to close after them
Respond = Callable[[bytes, bytes, int], Awaitable[tuple[bytes | None, bool]]]


def hop_against(respond: Respond, check: Callable[[TritonHop, list[int]], Awaitable[None]]) -> None:
    """Serve ``respond`` on a free port and run ``check(hop, connections)`` (connections: 1, 2, ... as opened)
    with a TritonHop calling it; the hop and the server are closed also when ``check`` fails."""
    connections: list[int] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(len(connections) + 1)
        number = len(connections)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                                  if line.lower().startswith(b"content-length")))
                data, close = await respond(head, await reader.readexactly(length), number)
                if data is None:
                    break
                writer.write(data)
                await writer.drain()
                if close:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    async def main() -> None:
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        hop = TritonHop(f"http://127.0.0.1:{port}")
        try:
            await check(hop, connections)
        finally:
            await hop.close()
            server.close()
            await server.wait_closed()

    asyncio.run(main())
