"""The hop's answers (aiohttp) against a raw server on loopback that sends each odd answer the way a server can: an
interim 100, a body cut short by a dying server (Content-Length or chunked), an answer past SageMaker's 6 MB,
bytes that are not HTTP, and a kept connection closed before or after the request was written: each request
reaches the server at most once (a connection found closed before the write is replaced; one that drops after
it fails the call)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from raw_triton import hop_against

from conch.endpoint.hop import AnswerTooLarge, HopError, HopTimeout, TritonHop
from conch.wire import MAX_BODY_BYTES

# what the server does with one request: the bytes to send (None: close without a word), and whether to close after
Reply = Callable[[bytes, int], Awaitable[tuple[bytes | None, bool]]]


def serve_and_check(reply: Reply, check: Callable[[TritonHop, list[int], list[bytes]], Awaitable[None]]) -> None:
    """A server answering ``reply(request body, connection number)``; ``check(hop, connections, received)``
    (received: every request body the server read, in order)."""
    received: list[bytes] = []

    async def respond(head: bytes, body: bytes, number: int) -> tuple[bytes | None, bool]:
        received.append(body)
        return await reply(body, number)

    async def checked(hop: TritonHop, connections: list[int]) -> None:
        await check(hop, connections, received)

    hop_against(respond, checked)


def ok(body: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)


def chunked(body: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)


async def echo(body: bytes, number: int) -> tuple[bytes | None, bool]:
    return ok(body), False


def test_a_kept_connection_seen_closed_before_the_write_is_replaced_and_the_call_sent_once() -> None:
    async def reply(body: bytes, number: int) -> tuple[bytes | None, bool]:
        return ok(body), number == 1  # the first connection closes right after its answer

    async def check(hop: TritonHop, connections: list[int], received: list[bytes]) -> None:
        assert (await hop.invoke("m.tar.gz", b"1", "application/json")).content == b"1"
        # the server's FIN is in the kernel before this call writes, but the loop has not read it yet
        assert (await hop.invoke("m.tar.gz", b"2", "application/json")).content == b"2"
        assert connections == [1, 2] and received == [b"1", b"2"]

    serve_and_check(reply, check)


def test_a_kept_connection_the_loop_saw_closed_is_never_taken() -> None:
    async def reply(body: bytes, number: int) -> tuple[bytes | None, bool]:
        return ok(body), number == 1

    async def check(hop: TritonHop, connections: list[int], received: list[bytes]) -> None:
        assert (await hop.invoke("m.tar.gz", b"1", "application/json")).content == b"1"
        await asyncio.sleep(0.2)  # the loop reads the EOF: the connection leaves the pool
        assert (await hop.invoke("m.tar.gz", b"2", "application/json")).content == b"2"
        assert connections == [1, 2] and received == [b"1", b"2"]

    serve_and_check(reply, check)


def test_a_drop_after_the_request_was_written_is_an_error_not_a_resend() -> None:
    async def reply(body: bytes, number: int) -> tuple[bytes | None, bool]:
        return (ok(body), False) if body == b"first" else (None, True)  # the second request: read, then closed

    async def check(hop: TritonHop, connections: list[int], received: list[bytes]) -> None:
        assert (await hop.invoke("m.tar.gz", b"first", "application/json")).content == b"first"
        with pytest.raises(HopError, match="Server disconnected"):
            await hop.invoke("m.tar.gz", b"second", "application/json")  # on the kept connection
        assert connections == [1] and received == [b"first", b"second"]  # Triton may have run it: not sent again

    serve_and_check(reply, check)


@pytest.mark.parametrize("cut", [
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"half\":",
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n8\r\n{\"half\":\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Type: appl",
], ids=["content-length", "chunked", "head"])
def test_a_server_dying_mid_answer_is_an_error_not_a_short_answer(cut: bytes) -> None:
    async def reply(body: bytes, number: int) -> tuple[bytes | None, bool]:
        return cut, True

    async def check(hop: TritonHop, connections: list[int], received: list[bytes]) -> None:
        with pytest.raises(HopError):
            await hop.invoke("m.tar.gz", b"x", "application/json")
        assert connections == [1] and received == [b"x"]

    serve_and_check(reply, check)


def test_an_interim_100_answer_is_skipped_for_the_real_one() -> None:
    async def reply(body: bytes, number: int) -> tuple[bytes | None, bool]:
        return b"HTTP/1.1 100 Continue\r\n\r\n" + ok(body), False

    async def check(hop: TritonHop, connections: list[int], received: list[bytes]) -> None:
        for body in (b"a", b"b"):
            answer = await hop.invoke("m.tar.gz", body, "application/json")
            assert (answer.status, answer.content) == (200, body)
        assert connections == [1]

    serve_and_check(reply, check)


def test_bytes_that_are_not_http_are_an_error_and_the_connection_is_dropped() -> None:
    async def reply(body: bytes, number: int) -> tuple[bytes | None, bool]:
        return (b"SSH-2.0-OpenSSH\r\n\r\n", False) if number == 1 else (ok(body), False)

    async def check(hop: TritonHop, connections: list[int], received: list[bytes]) -> None:
        with pytest.raises(HopError):
            await hop.invoke("m.tar.gz", b"x", "application/json")
        assert (await hop.invoke("m.tar.gz", b"y", "application/json")).content == b"y"
        assert connections == [1, 2]

    serve_and_check(reply, check)


@pytest.mark.parametrize("framing", ["content-length", "chunked", "close"])
def test_an_answer_past_sagemakers_size_is_refused_without_reading_it_all(framing: str) -> None:
    big = b"x" * (MAX_BODY_BYTES + 1024 * 1024)  # refused a good way before its end

    async def reply(body: bytes, number: int) -> tuple[bytes | None, bool]:
        if body != b"big":
            return ok(body), False
        if framing == "content-length":  # refused from its head: the body is never sent here
            return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(big), False
        if framing == "chunked":
            return chunked(big), False
        return b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + big, True

    async def check(hop: TritonHop, connections: list[int], received: list[bytes]) -> None:
        with pytest.raises(AnswerTooLarge, match=rf"HTTP 200 with a body (of|past) \d+ bytes \(at most "
                                                 rf"{MAX_BODY_BYTES} pass\)") as refused:
            await hop.invoke("m.tar.gz", b"big", "application/json")
        assert refused.value.size > MAX_BODY_BYTES and isinstance(refused.value, HopError)
        assert (await hop.invoke("m.tar.gz", b"after", "application/json")).content == b"after"
        assert connections == [1, 2]  # the connection that owed the rest was dropped

    serve_and_check(reply, check)


def test_an_answer_of_exactly_sagemakers_size_passes_whole() -> None:
    full = b"y" * MAX_BODY_BYTES

    async def reply(body: bytes, number: int) -> tuple[bytes | None, bool]:
        return chunked(full), False

    async def check(hop: TritonHop, connections: list[int], received: list[bytes]) -> None:
        assert (await hop.invoke("m.tar.gz", b"x", "application/json")).content == full

    serve_and_check(reply, check)


def test_a_large_request_body_goes_out_whole_and_answers_keep_their_order() -> None:
    body = b"z" * (3 * 1024 * 1024)

    async def check(hop: TritonHop, connections: list[int], received: list[bytes]) -> None:
        answers = await asyncio.gather(*(hop.invoke("m.tar.gz", body + b"%d" % i, "application/json")
                                         for i in range(3)))
        assert [a.content for a in answers] == [body + b"%d" % i for i in range(3)]
        assert len(connections) == 3  # one call per connection at a time

    serve_and_check(echo, check)


def test_a_kept_connection_idle_too_long_is_closed_by_the_hop(monkeypatch: pytest.MonkeyPatch) -> None:
    from conch.endpoint import hop

    monkeypatch.setattr(hop, "IDLE_S", 0.1)

    async def check(hop: TritonHop, connections: list[int], received: list[bytes]) -> None:
        assert (await hop.invoke("m.tar.gz", b"1", "application/json")).content == b"1"
        await asyncio.sleep(0.3)
        assert (await hop.invoke("m.tar.gz", b"2", "application/json")).content == b"2"
        assert connections == [1, 2] and received == [b"1", b"2"]

    serve_and_check(echo, check)


def test_control_characters_never_reach_a_request_head() -> None:
    async def check(hop: TritonHop, connections: list[int], received: list[bytes]) -> None:
        with pytest.raises(ValueError, match=r"control characters cannot go into an HTTP header"):
            await hop.invoke("m.tar.gz\r\nX-Evil: 1", b"x", "application/json")
        assert connections == []

    serve_and_check(echo, check)


def test_calls_past_the_open_connections_wait_for_one_and_time_out_within_their_own_limit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from conch.endpoint import hop

    monkeypatch.setattr(hop, "OPEN", 2)

    async def reply(body: bytes, number: int) -> tuple[bytes | None, bool]:
        await asyncio.sleep(0.5 if body == b"slow" else 0.05)
        if body == b"last":  # an answer that ends its connection
            return b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 4\r\n\r\nlast", True
        return ok(body), False

    async def check(hop: TritonHop, connections: list[int], received: list[bytes]) -> None:
        answers = await asyncio.gather(*(hop.invoke("m.tar.gz", b"%d" % i, "application/json") for i in range(6)))
        assert [a.content for a in answers] == [b"%d" % i for i in range(6)] and connections == [1, 2]
        slow = asyncio.gather(*(hop.invoke("m.tar.gz", b"slow", "application/json") for _ in range(2)))
        await asyncio.sleep(0.05)
        with pytest.raises(HopTimeout, match="no answer within 0.2 s"):
            await hop.invoke("m.tar.gz", b"waits", "application/json", timeout=0.2)  # no connection came free
        assert [a.content for a in await slow] == [b"slow", b"slow"]
        # a connection that ends (closed after its answer) frees its place: a waiting call opens a new one
        done = await asyncio.gather(hop.invoke("m.tar.gz", b"last", "application/json"),
                                    hop.invoke("m.tar.gz", b"last", "application/json"),
                                    hop.invoke("m.tar.gz", b"after", "application/json"))
        assert [a.content for a in done] == [b"last", b"last", b"after"]
        assert connections == [1, 2, 3]  # the two closed, one new for the waiting call

    serve_and_check(reply, check)
