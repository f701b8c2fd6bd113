"""The front: SageMaker's runtime API (``POST /endpoints/<name>/invocations`` with the TargetModel header,
``GET /ping``) and the metrics, as a Starlette app over one Fleet."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from conch.harness.endpoint.fleet import Fleet, Model
from conch.harness.endpoint.protocol import (
    EndpointError,
    ModelNotReady,
    ValidationError,
    model_error,
    timed_out,
)
from conch.wire import MAX_BODY_BYTES, TARGET_HEADER

log = logging.getLogger("conch.endpoint")
# What Triton 2.51 answers when its name lookup misses: the name is gone from its map, or maps to nothing
LOOKUP_MISSES = ("Request for unknown model", "is not found in global map")
LATE: set[asyncio.Future[Any]] = set()  # loads that go on after their caller was answered ModelNotReady


def create_app(endpoint_name: str, make_fleet: Callable[[], Fleet], refresh: Callable[[], None],
               healthy: Callable[[], bool]) -> Starlette:
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

    async def invocations(request: Request) -> Response:
        fleet = state["fleet"]
        try:
            return await invoke(fleet, endpoint_name, request)
        except EndpointError as exc:
            fleet.metrics.invocations.labels("4XX" if exc.status < 500 else "5XX").inc()
            return exc.response()

    async def metrics(request: Request) -> Response:
        refresh()
        return Response(state["fleet"].metrics.prometheus(), media_type="text/plain; version=0.0.4")

    async def metrics_json(request: Request) -> Response:
        refresh()
        fleet = state["fleet"]
        return JSONResponse({**fleet.metrics.snapshot(), "loaded": fleet.loaded(),
                             "step_names": fleet.step_names.value})

    routes = [
        Route("/ping", ping, methods=["GET"]),
        Route("/endpoints/{name:path}/invocations", invocations, methods=["POST"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/metrics.json", metrics_json, methods=["GET"]),
    ]
    return Starlette(routes=routes, lifespan=lifespan)


async def invoke(fleet: Fleet, endpoint_name: str, request: Request) -> Response:
    """One invocation: check the request, get the TargetModel loaded (within SageMaker's load wait), pass the
    body through to Triton (within what is left of SageMaker's invocation timeout)."""
    arrived = time.monotonic()
    name = request.path_params["name"]
    if name != endpoint_name:  # SageMaker's answer for an endpoint name the account does not have
        raise ValidationError(f"Endpoint {name} of account local not found. This local MME serves endpoint "
                              f"{endpoint_name!r}: call it with EndpointName={endpoint_name!r} (conch serve "
                              "--endpoint-name sets it)")
    target = request.headers.get(TARGET_HEADER)
    if not target:
        raise ValidationError(f"Request is missing a target model header ({TARGET_HEADER}): endpoint "
                              f"{endpoint_name!r} is a multi-model endpoint; pass TargetModel='<archive>.tar.gz'")
    body = await request.body()
    if len(body) > MAX_BODY_BYTES:
        raise ValidationError(f"TargetModel {target!r}: the request body is {len(body)} bytes; SageMaker takes at "
                              f"most {MAX_BODY_BYTES} bytes per invocation")
    content_type = request.headers.get("content-type", "application/json")
    budgets = fleet.budgets
    deadline = arrived + budgets.invocation_timeout
    retried = False
    for _ in range(3):  # again only when Triton lost a model we counted loaded, or (--retry-lookup) missed its name
        model = await acquire_within(fleet, target, min(budgets.load_wait, deadline - time.monotonic()))
        start = time.monotonic()
        try:
            answer = await fleet.hop.invoke(target, body, content_type, max(deadline - start, 0.001))
        except httpx.TimeoutException:
            fleet.metrics.timeouts.inc()
            raise timed_out(target, budgets.invocation_timeout) from None
        except httpx.HTTPError as exc:
            raise fleet.unreachable(target, exc) from None
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
        fleet.metrics.invocations.labels("2XX").inc()
        return Response(answer.content, status_code=200, media_type=None,
                        headers={"Content-Type": answer.content_type or "application/json",
                                 "x-Amzn-Invoked-Production-Variant": "AllTraffic"})
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
