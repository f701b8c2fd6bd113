"""A model's KServe v2 HTTP routes as Triton's HTTP front matches them, and the headers of a binary+json body
there, for every caller (a profile's requests and statistics, a Locust load run, replay's KServe endpoint).

Triton (server src/http_server.cc, v2.51.0) matches the request path as it arrives against
``/v2/models/([^/]+)(?:/versions/([0-9]+))?(?:/(infer|ready|config|stats|...))?`` and decodes no %XX escape:
``/v2/models/a%2Bb/infer`` asks for a model named ``a%2Bb``, not ``a+b``. So the name goes into the path verbatim,
and a name a URL path cannot carry verbatim cannot be reached over HTTP at all: it is refused here, by name,
rather than sent escaped to a model that does not exist."""

from __future__ import annotations

import string

from conch.errors import ServeError
from conch.wire import BINARY_CONTENT_TYPE

HEADER_LENGTH = "Inference-Header-Content-Length"  # KServe's binary extension: the JSON header's bytes

# RFC 3986's pchar without its %XX escapes: unreserved, sub-delims, ':' and '@'. HTTP clients (httpx, urllib3,
# geventhttpclient) send these unchanged; any other character they escape, refuse or cut the path at.
VERBATIM = frozenset(string.ascii_letters + string.digits + "-._~" + "!$&'()*+,;=" + ":@")


def model_path(model: str, route: str = "") -> str:
    """``/v2/models/<model>[/<route>]`` with ``model`` as Triton's HTTP front will match it (``route``: infer,
    config, stats, ready, or "" for the model's metadata)."""
    if model in ("", ".", ".."):
        raise ServeError(f"{model!r} is not a model name Triton's HTTP front can route; give the model's name")
    bad = sorted(set(model) - VERBATIM)
    if bad:
        shown = ", ".join(ascii(c) for c in bad)
        raise ServeError(
            f"model {model!r} cannot be reached over KServe v2 HTTP: a URL path cannot carry {shown} as it is, and "
            "Triton's HTTP front decodes no %XX escape (it would look for another name); rename the model (or "
            "the TargetModel) to letters, digits and -._~!$&'()*+,;=:@"
        )
    return f"/v2/models/{model}/{route}" if route else f"/v2/models/{model}"


def infer_path(model: str) -> str:
    """``/v2/models/<model>/infer``: one inference request."""
    return model_path(model, "infer")


def request_headers(content_type: str) -> dict[str, str]:
    """KServe's headers for a body conch.wire encoded: JSON as it is; binary+json (SageMaker's content type
    carrying the JSON header's length) as octet-stream with ``Inference-Header-Content-Length``."""
    if not content_type.startswith(BINARY_CONTENT_TYPE):
        return {"Content-Type": "application/json"}
    return {"Content-Type": "application/octet-stream", HEADER_LENGTH: content_type.removeprefix(BINARY_CONTENT_TYPE)}


def response_content_type(header_length: str | None) -> str:
    """An answer's content type as conch.wire parses it, from its ``Inference-Header-Content-Length`` (None:
    a JSON answer)."""
    return f"{BINARY_CONTENT_TYPE}{header_length}" if header_length else "application/json"
