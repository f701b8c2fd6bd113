"""The front: SageMaker's runtime API (``POST /endpoints/<name>/invocations`` with the TargetModel header,
``GET /ping``) and the metrics. Invocations, the hot path, are answered by a plain ASGI handler (no request,
response or middleware objects per call); the other routes by a Starlette app over the same Fleet."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from conch.endpoint.fleet import Fleet, Model
from conch.endpoint.hop import AnswerTooLarge, HopError, HopTimeout
from conch.endpoint.protocol import (
    EndpointError,
    ModelNotReady,
    ValidationError,
    answer_too_large,
    model_error,
    timed_out,
)
from conch.wire import MAX_BODY_BYTES, TARGET_HEADER

log = logging.getLogger("conch.endpoint")
# What Triton 2.51 answers when its name lookup misses: the name is gone from its map, or maps to nothing
LOOKUP_MISSES = ("Request for unknown model", "is not found in global map")
LATE: set[asyncio.Future[Any]] = set()  # loads that go on after their caller was answered ModelNotReady
# ``/endpoints/<name>/invocations``, <name> any text (Starlette's ``{name:path}``)
PREFIX, SUFFIX = "/endpoints/", "/invocations"
TARGET_KEY = TARGET_HEADER.lower().encode("latin-1")
VARIANT = (b"x-amzn-invoked-production-variant", b"AllTraffic")
INTERNAL_ERROR = PlainTextResponse("Internal Server Error", status_code=500)  # what Starlette answers a crash


def create_app(endpoint_name: str, make_fleet: Callable[[], Fleet], refresh: Callable[[], None],
               healthy: Callable[[], bool]) -> ASGIApp:
    """``make_fleet`` runs on the server's event loop at startup (the fleet's lock and clients belong to it);
    ``refresh`` updates the memory and disk gauges before metrics are read; ``healthy`` answers ``/ping``."""
    state: dict[str, Fleet] = {}

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        state["fleet"] = make_fleet()
        try:
            yield
        finally:
            await state["fleet"].hop.close()

    async def ping(request: Request) -> Response:
        return Response(status_code=200 if healthy() else 503)

    async def metrics(request: Request) -> Response:
        refresh()
        return Response(state["fleet"].metrics.prometheus(), media_type="text/plain; version=0.0.4")

    async def metrics_json(request: Request) -> Response:
        refresh()
        fleet = state["fleet"]
        return JSONResponse({**fleet.metrics.snapshot(), "loaded": fleet.loaded(),
                             "step_names": fleet.step_names.value})

    class Routed:  # a POST the fast path below let by (the app mounted under a root path)
        async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
            await invocation(scope, receive, send, scope["path_params"]["name"])

    routes = [
        Route("/ping", ping, methods=["GET"]),
        # a plain ASGI endpoint (an instance is not wrapped in Request/Response); other methods get Starlette's 405
        Route(PREFIX + "{name:path}" + SUFFIX, Routed(), methods=["POST"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/metrics.json", metrics_json, methods=["GET"]),
    ]
    starlette = Starlette(routes=routes, lifespan=lifespan)

    async def invocation(scope: Scope, receive: Receive, send: Send, name: str) -> None:
        fleet = state["fleet"]
        try:
            content, content_type = await invoke(fleet, endpoint_name, name, scope["headers"], receive)
        except EndpointError as exc:
            fleet.metrics.answered["4XX" if exc.status < 500 else "5XX"].inc()
            await exc.response()(scope, receive, send)
            return
        except Disconnected:
            return  # nobody to answer
        except Exception:
            await INTERNAL_ERROR(scope, receive, send)
            raise  # uvicorn logs it
        # the headers Starlette's Response(content, headers={...}) sent, in its order
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", content_type.encode("latin-1")), VARIANT,
            (b"content-length", str(len(content)).encode("latin-1"))]})
        await send({"type": "http.response.body", "body": content})

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            path: str = scope["path"]
            if (len(path) >= len(PREFIX) + len(SUFFIX) and path.startswith(PREFIX) and path.endswith(SUFFIX)):
                await invocation(scope, receive, send, path[len(PREFIX):-len(SUFFIX)])
                return
        await starlette(scope, receive, send)

    return app


class Disconnected(Exception):
    """The caller went away before its request's body arrived (nobody to answer; not counted)."""


class TooLarge(Exception):
    """The request's body passed the limit; ``size``: its length (read to its end, not kept)."""

    def __init__(self, size: int) -> None:
        super().__init__(f"{size} bytes")
        self.size = size


GONE = "the caller went away before its request's body ended"


async def read_body(receive: Receive, limit: int = MAX_BODY_BYTES) -> bytes:
    """The request's body: the one message's bytes as they are (no copy) when it came in one. TooLarge past
    ``limit`` bytes: the rest is read and counted, not kept (a caller's 1 GB body is not held in memory)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise Disconnected(GONE)
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        if size <= limit:
            chunks.append(chunk)
        elif chunks:
            chunks = []
        if not message.get("more_body", False):
            if size > limit:
                raise TooLarge(size)
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


async def invoke(fleet: Fleet, endpoint_name: str, name: str, headers: Iterable[tuple[bytes, bytes]],
                 receive: Receive) -> tuple[bytes, str]:
    """One invocation of endpoint ``name`` (the request's ``headers`` and body): check the request, get the
    TargetModel loaded (within SageMaker's load wait), pass the body through to Triton (within what is left of
    SageMaker's invocation timeout); Triton's answer and its Content-Type."""
    arrived = time.monotonic()
    if name != endpoint_name:  # SageMaker's answer for an endpoint name the account does not have
        raise ValidationError(f"Endpoint {name} of account local not found. This local MME serves endpoint "
                              f"{endpoint_name!r}: call it with EndpointName={endpoint_name!r} (conch serve "
                              "--endpoint-name sets it)")
    target = content_type = None
    for key, value in headers:  # the first of each, as Starlette's Headers.get
        if key == TARGET_KEY:
            target = value.decode("latin-1") if target is None else target
        elif key == b"content-type" and content_type is None:
            content_type = value.decode("latin-1")
    if not target:
        raise ValidationError(f"Request is missing a target model header ({TARGET_HEADER}): endpoint "
                              f"{endpoint_name!r} is a multi-model endpoint; pass TargetModel='<archive>.tar.gz'")
    try:
        body = await read_body(receive)
    except TooLarge as exc:
        raise ValidationError(f"TargetModel {target!r}: the request body is {exc.size} bytes; SageMaker takes at "
                              f"most {MAX_BODY_BYTES} bytes per invocation") from None
    content_type = content_type or "application/json"
    budgets = fleet.budgets
    deadline = arrived + budgets.invocation_timeout
    retried = False
    for _ in range(3):  # again only when Triton lost a model we counted loaded, or (--retry-lookup) missed its name
        model = fleet.take_loaded(target) or await acquire_within(
            fleet, target, min(budgets.load_wait, deadline - time.monotonic()))
        start = time.monotonic()
        try:
            answer = await fleet.hop.invoke(target, body, content_type, max(deadline - start, 0.001))
        except HopTimeout:
            fleet.metrics.timeouts.inc()
            raise timed_out(target, budgets.invocation_timeout) from None
        except AnswerTooLarge as exc:
            raise answer_too_large(target, str(exc)) from None
        except HopError as exc:
            raise await fleet.unreachable(target, exc) from None
        finally:
            await fleet.release(model)
        fleet.metrics.time("ModelLatency", time.monotonic() - start)
        if answer.status == 404 and not answer.content:
            await fleet.forget(model)
            continue
        if answer.status == 400 and any(m in answer.error_text() for m in LOOKUP_MISSES):
            # Triton looks the name up without the lock its loads and unloads hold while they rewrite the map
            # (core's FindModelIdentifier, unlocked in 2.51 and still in core r26.06): a load or unload of another
            # model can make it miss a loaded one. A SageMaker endpoint passes the answer on.
            fleet.metrics.lookup_misses.inc()
            if fleet.retry_lookup and not retried:
                retried = True
                fleet.metrics.lookup_retries.inc()
                log.warning("TargetModel %s: Triton answered %r while it is loaded (its unlocked lookup raced another "
                            "model's load or unload); asking once more (--retry-lookup)", target, answer.error_text())
                continue
            log.warning("TargetModel %s: Triton answered %r while it is loaded (its unlocked lookup raced another "
                        "model's load or unload); passed on, as SageMaker does", target, answer.error_text())
        if answer.status != 200:
            raise model_error(target, answer.status, answer.error_text())
        fleet.metrics.answered["2XX"].inc()
        return answer.content, answer.content_type or "application/json"
    raise EndpointError(f"TargetModel {target!r}: Triton lost the model twice right after loading it")


async def acquire_within(fleet: Fleet, target: str, wait: float) -> Model:
    """``fleet.acquire(target)``, or ModelNotReady past ``wait`` seconds: the load goes on without this call (as
    on SageMaker), and the model it brings up is released when it is."""
    task = asyncio.ensure_future(fleet.acquire(target))
    done, _ = await asyncio.wait({task}, timeout=max(wait, 0.0))
    if task in done:
        return task.result()

    def release_late(finished: asyncio.Future[Model]) -> None:
        LATE.discard(finished)
        if not finished.cancelled() and finished.exception() is None:
            release = asyncio.ensure_future(fleet.release(finished.result()))
            LATE.add(release)
            release.add_done_callback(LATE.discard)

    LATE.add(task)
    task.add_done_callback(release_late)
    fleet.metrics.not_ready.inc()
    raise ModelNotReady(f"TargetModel {target!r} is still downloading or loading after {wait:g} s (the load wait; "
                        "SageMaker answers within 60 s and loads on for up to 360 s): retry the request")
