"""The front: SageMaker's runtime API (``POST /endpoints/<name>/invocations`` with the TargetModel header,
``GET /ping``) and the metrics, as a Starlette app over one Fleet."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from conch.harness.endpoint.fleet import Fleet
from conch.harness.endpoint.protocol import TARGET_HEADER, EndpointError, ModelError, ValidationError, model_error
from conch.sagemaker.invoke import MAX_BODY_BYTES

log = logging.getLogger("conch.endpoint")
# What Triton 2.51 answers when its name lookup misses: the name is gone from its map, or maps to nothing
LOOKUP_MISSES = ("Request for unknown model", "is not found in global map")


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
        return JSONResponse({**fleet.metrics.snapshot(), "loaded": fleet.loaded()})

    routes = [
        Route("/ping", ping, methods=["GET"]),
        Route("/endpoints/{name:path}/invocations", invocations, methods=["POST"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/metrics.json", metrics_json, methods=["GET"]),
    ]
    return Starlette(routes=routes, lifespan=lifespan)


async def invoke(fleet: Fleet, endpoint_name: str, request: Request) -> Response:
    """One invocation: check the request, get the TargetModel loaded, pass the body through to Triton."""
    name = request.path_params["name"]
    if name != endpoint_name:
        raise ValidationError(f"Endpoint {name} of account local not found. This local MME serves endpoint "
                              f"{endpoint_name!r}: call it with EndpointName={endpoint_name!r}")
    target = request.headers.get(TARGET_HEADER)
    if not target:
        raise ValidationError(f"Request is missing a target model header ({TARGET_HEADER}): endpoint "
                              f"{endpoint_name!r} is a multi-model endpoint; pass TargetModel='<archive>.tar.gz'")
    body = await request.body()
    if len(body) > MAX_BODY_BYTES:
        raise ValidationError(f"TargetModel {target!r}: the request body is {len(body)} bytes; SageMaker takes at "
                              f"most {MAX_BODY_BYTES} bytes per invocation")
    content_type = request.headers.get("content-type", "application/json")
    for attempt in range(2):  # a second round when Triton lost a model we counted loaded, or missed its name
        model = await fleet.acquire(target)
        start = time.monotonic()
        try:
            answer = await fleet.hop.invoke(target, body, content_type)
        except httpx.TimeoutException:
            raise ModelError(f"TargetModel {target!r}: the invocation timed out waiting for Triton", 504,
                             "timed out") from None
        except httpx.HTTPError as exc:
            raise fleet.unreachable(target, exc) from None
        finally:
            await fleet.release(model)
        fleet.metrics.time("ModelLatency", time.monotonic() - start)
        if answer.status == 404 and not answer.content:
            await fleet.forget(model)
            continue
        if attempt == 0 and answer.status == 400 and any(m in answer.error_text() for m in LOOKUP_MISSES):
            # Triton 2.51 looks the name up without the lock its loads and unloads hold while they rewrite the
            # map (core's FindModelIdentifier): a load or unload of another model can make it miss a loaded one
            fleet.metrics.lookup_retries.inc()
            log.warning("TargetModel %s: Triton answered %r while it is loaded (an unlocked lookup raced another "
                        "model's load or unload); asking once more", target, answer.error_text())
            continue
        if answer.status != 200:
            raise model_error(target, answer.status, answer.error_text())
        fleet.metrics.invocations.labels("2XX").inc()
        return Response(answer.content, status_code=200, media_type=None,
                        headers={"Content-Type": answer.content_type or "application/json",
                                 "x-Amzn-Invoked-Production-Variant": "AllTraffic"})
    raise EndpointError(f"TargetModel {target!r}: Triton lost the model twice right after loading it")
