"""The front's invocation route as a plain ASGI handler: what Starlette answered before still answered the same
way where the fast path does not apply (another method, an app mounted under a root path), and bodies read as
they arrive. No Triton is needed: every call here is refused before the hop."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest
from starlette.testclient import TestClient

from conch.endpoint.app import Disconnected, TooLarge, create_app, read_body
from conch.endpoint.metrics import Metrics
from conch.wire import TARGET_HEADER


class NoHop:
    async def close(self) -> None:
        pass


class Front:
    """What the front reads of a Fleet before a call reaches the hop."""

    def __init__(self) -> None:
        self.metrics = Metrics()
        self.hop = NoHop()


def client(front: Front, root_path: str = "", raise_server_exceptions: bool = True) -> TestClient:
    app = create_app("local-mme", lambda: front, lambda: None, lambda: True)  # type: ignore[arg-type,return-value]
    return TestClient(app, root_path=root_path, raise_server_exceptions=raise_server_exceptions)


def test_an_invocation_under_a_root_path_gets_sagemakers_answer() -> None:
    front = Front()
    with client(front, root_path="/proxied") as http:
        answer = http.post("/proxied/endpoints/prod/invocations", content=b"{}",
                           headers={TARGET_HEADER: "a.tar.gz", "Content-Type": "application/json"})
    assert (answer.status_code, answer.headers["x-amzn-ErrorType"]) == (400, "ValidationError")
    assert re.match(re.escape("Endpoint prod of account local not found. This local MME serves endpoint "
                              "'local-mme'"), answer.json()["Message"])
    assert front.metrics.snapshot()["Invocations"] == {"2XX": 0, "4XX": 1, "5XX": 0}


def test_a_get_of_the_invocations_path_is_method_not_allowed() -> None:
    with client(Front()) as http:
        answer = http.get("/endpoints/local-mme/invocations")
        missing = http.post("/endpoints/local-mme/invocations", content=b"{}")
    assert (answer.status_code, answer.text) == (405, "Method Not Allowed")
    assert missing.status_code == 400
    assert missing.json()["Message"].startswith(f"Request is missing a target model header ({TARGET_HEADER})")


def test_a_failure_of_the_front_itself_answers_500_as_starlette_did() -> None:
    front = Front()  # no budgets: the call fails past the checks, as a bug in the front would
    with client(front, raise_server_exceptions=False) as http:
        answer = http.post("/endpoints/local-mme/invocations", content=b"{}", headers={TARGET_HEADER: "a.tar.gz"})
    assert (answer.status_code, answer.text) == (500, "Internal Server Error")
    assert front.metrics.snapshot()["Invocations"] == {"2XX": 0, "4XX": 0, "5XX": 0}


def messages(*items: dict[str, Any]) -> Any:
    queue = list(items)

    async def receive() -> dict[str, Any]:
        return queue.pop(0)

    return receive


def test_a_body_in_several_messages_is_joined_and_one_message_is_passed_as_it_is() -> None:
    one = b"x" * 10
    assert asyncio.run(read_body(messages({"type": "http.request", "body": one}))) is one
    assert asyncio.run(read_body(messages({"type": "http.request", "body": b"ab", "more_body": True},
                                          {"type": "http.request", "body": b"cd"}))) == b"abcd"


@pytest.mark.parametrize("first", [[], [{"type": "http.request", "body": b"ab", "more_body": True}]])
def test_a_caller_gone_before_its_body_ends_is_not_answered(first: list[dict[str, Any]]) -> None:
    with pytest.raises(Disconnected, match="the caller went away before its request's body ended"):
        asyncio.run(read_body(messages(*first, {"type": "http.disconnect"})))


def test_a_body_past_the_limit_is_read_to_its_end_and_refused_with_its_size() -> None:
    parts = [b"x" * 3, b"y" * 3, b"z" * 3]

    async def receive() -> dict[str, Any]:
        chunk = parts.pop(0)
        return {"type": "http.request", "body": chunk, "more_body": bool(parts)}

    with pytest.raises(TooLarge, match="^9 bytes$") as refused:
        asyncio.run(read_body(receive, limit=4))
    assert refused.value.size == 9 and not parts  # the whole body was read (the caller gets its answer)
    with pytest.raises(TooLarge, match="^5 bytes$"):
        asyncio.run(read_body(messages({"type": "http.request", "body": b"12345"}), limit=4))
    assert asyncio.run(read_body(messages({"type": "http.request", "body": b"ab", "more_body": True},
                                          {"type": "http.request", "body": b"cd"}), limit=4)) == b"abcd"


class OversizedHop(NoHop):
    async def invoke(self, target: str, body: bytes, content_type: str, timeout: float) -> None:
        from conch.endpoint.hop import AnswerTooLarge

        raise AnswerTooLarge(7_000_000, True, 200, 6_291_456)


class Loaded(Front):
    """A Fleet whose TargetModel is loaded, behind a hop whose answer is past SageMaker's size."""

    def __init__(self) -> None:
        from conch.endpoint.fleet import Budgets

        super().__init__()
        self.hop = OversizedHop()
        self.budgets = Budgets()
        self.released = 0

    def take_loaded(self, name: str) -> object:
        return name

    async def release(self, model: object) -> None:
        self.released += 1


def test_an_answer_past_sagemakers_size_is_a_model_error_not_passed_on() -> None:
    front = Loaded()
    with client(front) as http:
        answer = http.post("/endpoints/local-mme/invocations", content=b"{}", headers={TARGET_HEADER: "a.tar.gz"})
    body = answer.json()
    assert (answer.status_code, answer.headers["x-amzn-ErrorType"]) == (424, "ModelError")
    assert body["OriginalStatusCode"] == 0 and front.released == 1
    assert re.match(r"Received server error \(0\) from primary with message \"The response from container primary "
                    r"is larger than the 6 MB InvokeEndpoint returns\.\" \(local: TargetModel 'a\.tar\.gz' answered "
                    r"HTTP 200 with a body of 7000000 bytes", body["Message"])
    assert "is larger than the 6 MB InvokeEndpoint returns." in body["Message"]
    assert "Received server error (0) from primary with message" in body["Message"]
    assert front.metrics.snapshot()["Invocations"] == {"2XX": 0, "4XX": 1, "5XX": 0}
