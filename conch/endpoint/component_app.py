"""The front of a local endpoint with inference components: SageMaker's runtime API routed by the
``X-Amzn-SageMaker-Inference-Component`` header boto3 sends for ``InferenceComponentName``, the metrics, and one
admin route of conch's that sets a component's copy count (what ``UpdateInferenceComponentRuntimeConfig`` and
autoscaling do on SageMaker)."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable, Iterable

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from conch.endpoint.app import PREFIX, SUFFIX, VARIANT, Disconnected, TooLarge, read_body
from conch.endpoint.components import Component, ComponentMetrics, Copy
from conch.endpoint.hop import AnswerTooLarge, HopError, HopTimeout, TritonHop
from conch.endpoint.protocol import (
    EndpointError,
    ValidationError,
    answer_too_large,
    model_error,
    timed_out,
)
from conch.errors import ServeError
from conch.wire import COMPONENT_HEADER, MAX_BODY_BYTES

COMPONENT_KEY = COMPONENT_HEADER.lower().encode("latin-1")
# SageMaker's answer to a call of a component at zero copies (AWS Machine Learning blog, "Unlock cost savings with
# the new scale down to zero feature in SageMaker Inference", 2024-12-03): a ValidationError, counted in the
# component's NoCapacityInvocationFailures, the metric whose alarm scales it out
NO_CAPACITY = ("Inference Component has no capacity to process this request. ApplicationAutoScaling may be "
               "in-progress (if configured) or try to increase the capacity by invoking "
               "UpdateInferenceComponentRuntimeConfig API.")
RUNTIME_CONFIG = "/inference-components/{name}/runtime-config"  # conch's admin route


def create_component_app(endpoint_name: str, components: dict[str, Component], metrics: ComponentMetrics,
                         scale: Callable[[str, int], None], invocation_timeout: float) -> ASGIApp:
    """The front over ``components``; ``scale(name, copies)`` sets a copy count (ServeError when refused)."""
    hops: dict[int, TritonHop] = {}  # per copy (by id), made on the front's loop

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            for hop in hops.values():
                await hop.close()

    async def ping(request: Request) -> Response:
        return Response(status_code=200)

    async def prometheus(request: Request) -> Response:
        return Response(metrics.prometheus(), media_type="text/plain; version=0.0.4")

    async def metrics_json(request: Request) -> Response:
        return JSONResponse({"components": metrics.snapshot(),
                             "copies": {n: len(c.serving()) for n, c in components.items()},
                             "desired": {n: c.desired for n, c in components.items()}})

    async def runtime_config(request: Request) -> Response:
        name = request.path_params["name"]
        try:
            count = int((await request.json())["DesiredRuntimeConfig"]["CopyCount"])
            scale(name, count)
        except (ValueError, KeyError, TypeError):
            error: EndpointError = ValidationError(
                'give {"DesiredRuntimeConfig": {"CopyCount": N}}, as UpdateInferenceComponentRuntimeConfig takes it')
            return error.response()
        except ServeError as exc:
            return ValidationError(str(exc)).response()
        return JSONResponse({"InferenceComponentName": name, "DesiredCopyCount": count})

    async def invocation(scope: Scope, receive: Receive, send: Send, name: str) -> None:
        try:
            content, content_type = await invoke(name, scope["headers"], receive)
        except Disconnected:
            return
        except EndpointError as exc:
            await exc.response()(scope, receive, send)
            return
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", content_type.encode("latin-1")), VARIANT,
            (b"content-length", str(len(content)).encode("latin-1"))]})
        await send({"type": "http.response.body", "body": content})

    async def invoke(name: str, headers: Iterable[tuple[bytes, bytes]], receive: Receive) -> tuple[bytes, str]:
        arrived = time.monotonic()
        if name != endpoint_name:
            raise ValidationError(f"Endpoint {name} of account local not found. This local endpoint is "
                                  f"{endpoint_name!r} (conch serve --endpoint-name sets it)")
        wanted = content_type = None
        for key, value in headers:
            if key == COMPONENT_KEY and wanted is None:
                wanted = value.decode("latin-1")
            elif key == b"content-type" and content_type is None:
                content_type = value.decode("latin-1")
        component = components.get(wanted or "")
        if component is None:
            known = ", ".join(sorted(components))
            raise ValidationError(
                f"Inference Component Name header is required for endpoints to which you plan to deploy inference "
                f"components (InferenceComponentName: one of {known})" if not wanted else
                f"Inference component {wanted!r} not found on endpoint {endpoint_name!r} (it hosts {known})")
        try:
            body = await read_body(receive)
        except TooLarge as exc:
            count(component.name, 400)
            raise ValidationError(f"inference component {component.name!r}: the request body is {exc.size} bytes; "
                                  f"SageMaker takes at most {MAX_BODY_BYTES} bytes per invocation") from None
        copy = component.pick()
        if copy is None:
            metrics.no_capacity.labels(component.name).inc()
            count(component.name, 400)
            raise ValidationError(NO_CAPACITY)
        try:
            answer = await hop_of(copy).invoke(component.archive.name, body, content_type or "application/json",
                                               max(arrived + invocation_timeout - time.monotonic(), 0.001))
        except HopTimeout:
            count(component.name, 424)
            raise timed_out(component.name, invocation_timeout) from None
        except AnswerTooLarge as exc:
            count(component.name, 424)
            raise answer_too_large(component.name, str(exc)) from None
        except HopError as exc:
            count(component.name, 500)
            raise EndpointError(hop_of(copy).unreachable(component.name, exc)) from None
        metrics.latency.labels(component.name).observe(time.monotonic() - arrived)
        if answer.status != 200:
            metrics.model_errors.labels(component.name).inc()
            count(component.name, 424)
            raise model_error(component.name, answer.status, answer.error_text())
        count(component.name, 200)
        return answer.content, answer.content_type or "application/json"

    def count(name: str, status: int) -> None:
        metrics.invocations.labels(name).inc()
        if 400 <= status < 500:
            metrics.errors_4xx.labels(name).inc()
        elif status >= 500:
            metrics.errors_5xx.labels(name).inc()

    def hop_of(copy: Copy) -> TritonHop:
        hop = hops.get(id(copy))
        if hop is None:
            hop = hops[id(copy)] = TritonHop(copy.triton.sagemaker_url, copy.triton.log_path)
        return hop

    class Routed:
        async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
            await invocation(scope, receive, send, scope["path_params"]["name"])

    starlette = Starlette(routes=[
        Route("/ping", ping, methods=["GET"]),
        Route(PREFIX + "{name:path}" + SUFFIX, Routed(), methods=["POST"]),
        Route("/metrics", prometheus, methods=["GET"]),
        Route("/metrics.json", metrics_json, methods=["GET"]),
        Route(RUNTIME_CONFIG, runtime_config, methods=["POST"]),
    ], lifespan=lifespan)
    return starlette


def runtime_config_body(copies: int) -> bytes:
    """The admin route's body: UpdateInferenceComponentRuntimeConfig's shape."""
    return json.dumps({"DesiredRuntimeConfig": {"CopyCount": copies}}).encode()

