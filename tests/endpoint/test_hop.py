"""The hop's invocation client (aiohttp's pool) against a small server on loopback
that answers the way servers do: Content-Length or chunked bodies, keep-alive or close, a kept
connection the server closes while it is idle, no answer at all or none in time, and a restarted
server on another port."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable

import pytest
from raw_triton import hop_against

from conch.endpoint.hop import HopError, HopTimeout, TritonHop
from conch.triton.mme_contract import model_hash

Handler = Callable[[bytes, int], bytes | Awaitable[bytes | None] | None]


def answered(handler: Handler, check: Callable[[TritonHop, list[int]], object]) -> None:
    """Serve ``handler(request body, connection number) -> raw response`` (or an awaitable of it; None: close
    without a word, or after the answer when it ends in "\n\n" + "quietly") and run ``check(hop, connections)``."""

    async def respond(head: bytes, body: bytes, number: int) -> tuple[bytes | None, bool]:
        assert f"/models/{model_hash('m.tar.gz')}/invoke".encode() in head
        assert b"X-Amzn-SageMaker-Target-Model: m.tar.gz" in head
        response = handler(body, number)
        if inspect.isawaitable(response):  # an answer that takes its time
            response = await response
        if response is None:
            return None, True
        return response.removesuffix(b"quietly"), b"Connection: close" in response or response.endswith(b"quietly")

    async def checked(hop: TritonHop, connections: list[int]) -> None:
        result = check(hop, connections)
        if asyncio.iscoroutine(result):
            await result

    hop_against(respond, checked)


def ok(body: bytes, extra: str = "") -> bytes:
    return (f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n{extra}\r\n"
            ).encode() + body


def test_calls_reuse_one_kept_connection() -> None:
    async def check(hop: TritonHop, connections: list[int]) -> None:
        for i in range(3):
            answer = await hop.invoke("m.tar.gz", b'{"n": %d}' % i, "application/json")
            assert (answer.status, answer.content, answer.content_type) == (200, b'{"n": %d}' % i, "application/json")
        assert connections == [1]

    answered(lambda body, _: ok(body), check)


def test_chunked_and_close_delimited_answers_are_read_whole() -> None:
    def handler(body: bytes, number: int) -> bytes:
        if body == b"chunked":
            return (b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
                    b"\r\n5\r\n{\"err\r\nb;x=1\r\nor\": \"bad\"}\r\n0\r\n\r\n")
        return b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\nuntil the end"

    async def check(hop: TritonHop, connections: list[int]) -> None:
        first = await hop.invoke("m.tar.gz", b"chunked", "application/json")
        assert (first.status, first.error_text()) == (400, "bad")
        second = await hop.invoke("m.tar.gz", b"close", "application/json")  # on the same connection
        assert (second.status, second.content, second.content_type) == (200, b"until the end", "text/plain")
        third = await hop.invoke("m.tar.gz", b"close", "application/json")  # a new one: that one was closed
        assert third.content == b"until the end" and connections == [1, 2]

    answered(handler, check)


def test_a_kept_connection_the_server_closed_is_replaced() -> None:
    def handler(body: bytes, number: int) -> bytes:
        return ok(body) + (b"quietly" if number == 1 else b"")  # closes without saying so

    async def check(hop: TritonHop, connections: list[int]) -> None:
        assert (await hop.invoke("m.tar.gz", b"1", "application/json")).content == b"1"
        assert (await hop.invoke("m.tar.gz", b"2", "application/json")).content == b"2"
        assert connections == [1, 2]

    answered(handler, check)


def test_no_answer_is_a_hop_error_for_the_front() -> None:
    async def check(hop: TritonHop, connections: list[int]) -> None:
        with pytest.raises(HopError, match="Server disconnected"):
            await hop.invoke("m.tar.gz", b"x", "application/json")
        assert connections == [1]  # the request was written: not sent again (Triton may have run it)

    answered(lambda body, _: None, check)


def test_no_answer_in_time_is_a_hop_timeout() -> None:
    async def check(hop: TritonHop, connections: list[int]) -> None:
        with pytest.raises(HopTimeout, match="no answer within 0.3 s"):
            await hop.invoke("m.tar.gz", b"slow", "application/json", timeout=0.3)
        assert (await hop.invoke("m.tar.gz", b"fast", "application/json")).content == b"fast"
        assert connections == [1, 2]  # not on the connection that still owes the slow answer

    async def handler(body: bytes, number: int) -> bytes:
        if body == b"slow":
            await asyncio.sleep(2.0)  # the client gives up first and drops this connection
        return ok(body)

    answered(handler, check)


def test_each_calls_timeout_fires_at_its_own_deadline() -> None:
    """Calls in flight at once with their own limits: each fails when its limit is up, with the same error as
    alone; a call that was answered in time never times out."""

    async def timed(hop: TritonHop, body: bytes, timeout: float) -> tuple[str, float]:
        loop = asyncio.get_running_loop()
        start = loop.time()
        try:
            answer = await hop.invoke("m.tar.gz", body, "application/json", timeout=timeout)
        except HopTimeout as exc:
            return str(exc), loop.time() - start
        return answer.content.decode(), loop.time() - start

    async def check(hop: TritonHop, connections: list[int]) -> None:
        await hop.invoke("m.tar.gz", b"fast", "application/json")  # the first call sets up what the client uses
        results = await asyncio.gather(timed(hop, b"slow", 0.6), timed(hop, b"fast", 0.1), timed(hop, b"slow", 0.3),
                                       timed(hop, b"slow", 0.45))
        assert [text for text, _ in results] == ["no answer within 0.6 s", "fast", "no answer within 0.3 s",
                                                 "no answer within 0.45 s"]
        for (_, took), limit in zip(results, (0.6, None, 0.3, 0.45), strict=True):
            if limit is not None:
                # at its own limit, not at the answer (2 s): a loaded machine may run the loop late by a second
                assert limit - 0.002 <= took < limit + 1.0, (limit, took)
        assert (await hop.invoke("m.tar.gz", b"fast", "application/json")).content == b"fast"

    async def handler(body: bytes, number: int) -> bytes:
        if body == b"slow":
            await asyncio.sleep(2.0)
        return ok(body)

    answered(handler, check)


def test_a_stopped_server_is_a_hop_error_and_rebind_drops_the_old_connections() -> None:
    async def check(hop: TritonHop, connections: list[int]) -> None:
        assert (await hop.invoke("m.tar.gz", b"1", "application/json")).content == b"1"
        live = hop.url
        gone = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = gone.sockets[0].getsockname()[1]
        gone.close()
        await gone.wait_closed()
        await hop.rebind(f"http://127.0.0.1:{port}")
        with pytest.raises(HopError):
            await hop.invoke("m.tar.gz", b"2", "application/json")
        await hop.rebind(live)  # back: a new connection, the kept one went with the old client
        assert (await hop.invoke("m.tar.gz", b"3", "application/json")).content == b"3"
        assert connections == [1, 2]

    answered(lambda body, _: ok(body), check)


def test_invoke_urls_are_tritons_hash_routes_made_once_and_kept_within_a_bound() -> None:
    from conch.endpoint.hop import _CALLS_KEPT
    from conch.wire import TARGET_HEADER

    async def main() -> None:
        hop = TritonHop("http://127.0.0.1:9/")
        url, headers = hop._call("a.tar.gz", "application/json")
        assert str(url) == f"http://127.0.0.1:9/models/{model_hash('a.tar.gz')}/invoke"
        assert headers == {TARGET_HEADER: "a.tar.gz", "Content-Type": "application/json"}
        assert hop._call("a.tar.gz", "application/json")[0] is url  # made once
        assert hop._call("a.tar.gz", "application/octet-stream")[1]["Content-Type"] == "application/octet-stream"
        for index in range(_CALLS_KEPT):  # names callers make up do not grow it without end
            hop._call(f"{index}.tar.gz", "application/json")
        assert len(hop._calls) <= _CALLS_KEPT
        await hop.close()

    asyncio.run(main())


def test_a_call_waiting_for_a_connection_fails_when_the_pool_closes_and_opens_none() -> None:
    """Every connection busy, one more call waits; the hop is rebound (tritonserver exited, restarted on new ports):
    the waiting call fails at once with a HopError naming why, the calls under way fail as their connections
    close, and no connection is opened to the old port."""
    from conch.endpoint.hop import OPEN, SHUT

    async def main() -> tuple[int, list[BaseException], BaseException]:
        opened: list[int] = []

        async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            opened.append(1)
            await reader.read()  # never answers: until the hop closes the connection
            writer.close()

        server = await asyncio.start_server(hold, "127.0.0.1", 0)
        hop = TritonHop(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
        try:
            busy = [asyncio.ensure_future(hop.invoke("m.tar.gz", b"x", "application/json")) for _ in range(OPEN)]
            while len(opened) < OPEN:
                await asyncio.sleep(0.01)
            waiting = asyncio.ensure_future(hop.invoke("m.tar.gz", b"w", "application/json"))
            await asyncio.sleep(0.05)
            assert not waiting.done()
            await hop.rebind("http://127.0.0.1:9")
            with pytest.raises(HopError) as failed:
                await asyncio.wait_for(waiting, 5)
            under_way = await asyncio.wait_for(asyncio.gather(*busy, return_exceptions=True), 5)
            await asyncio.sleep(0.1)  # a connection opened after the close would have been accepted by now
            return len(opened), [e for e in under_way if isinstance(e, BaseException)], failed.value
        finally:
            await hop.close()
            server.close()
            await server.wait_closed()

    opened, under_way, error = asyncio.run(main())
    assert opened == OPEN
    assert len(under_way) == OPEN and all(isinstance(e, HopError) for e in under_way)
    assert str(error) == SHUT


def test_no_accept_encoding_is_asked_and_an_encoded_answer_passes_as_it_came() -> None:
    import gzip

    packed = gzip.compress(b'{"n": 1}', mtime=0)
    heads: list[bytes] = []

    async def respond(head: bytes, body: bytes, number: int) -> tuple[bytes | None, bool]:
        heads.append(head.lower())
        return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(packed), packed)), False

    async def check(hop: TritonHop, connections: list[int]) -> None:
        answer = await hop.invoke("m.tar.gz", b"x", "application/json")
        assert answer.content == packed  # not decompressed: the front passes Triton's bytes on
        assert b"accept-encoding" not in heads[0] and b"content-type: application/json" in heads[0]

    hop_against(respond, check)
