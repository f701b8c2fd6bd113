"""The launcher's forwarding, in this process: what a caller of a port sees through the hop is what it sees
without it (the bytes both ways, a half close passed on, a reset where nothing listens)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from conch.triton.namespace_launcher import forward, parse_forward
from conch.triton.network_namespace import loopback_listener

BODY = bytes(range(256)) * 12 * 1024  # 3 MiB: several splices of the pipe


def read_all(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


@contextmanager
def forwarded(port: int) -> Iterator[int]:
    """A host listener whose connections go to ``127.0.0.1:port``; its port."""
    listener = loopback_listener()
    thread = threading.Thread(target=forward, args=(listener, port), daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        listener.shutdown(socket.SHUT_RDWR)  # wakes its accept(), which then ends the thread
        thread.join(timeout=10)
        listener.close()
        assert not thread.is_alive()


def test_the_bytes_go_both_ways_and_a_half_close_is_passed_on() -> None:
    with loopback_listener() as inner:
        def answer() -> None:  # reads to the caller's end, then answers with what it read, reversed
            conn, _ = inner.accept()
            with conn:
                conn.sendall(read_all(conn)[::-1])

        server = threading.Thread(target=answer, daemon=True)
        server.start()
        with forwarded(inner.getsockname()[1]) as port, socket.create_connection(("127.0.0.1", port)) as caller:
            caller.sendall(BODY)
            caller.shutdown(socket.SHUT_WR)  # only then does the inner side answer
            assert read_all(caller) == BODY[::-1]
        server.join(timeout=10)


def test_a_port_where_nothing_listens_resets_the_callers_connection() -> None:
    with loopback_listener() as probe:
        free = probe.getsockname()[1]  # closed below: nothing listens there
    with forwarded(free) as port, socket.create_connection(("127.0.0.1", port)) as caller:
        caller.settimeout(10)
        with pytest.raises(ConnectionResetError):
            caller.sendall(b"GET / HTTP/1.1\r\n\r\n")
            caller.recv(1)


def test_a_forward_names_a_descriptor_and_a_port() -> None:
    assert parse_forward("5:8080") == (5, 8080)
