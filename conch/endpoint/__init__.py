"""A local SageMaker multi-model endpoint: many archives behind one endpoint on this machine, downloaded on
first use, loaded once, unloaded least-recently-used first, with SageMaker's runtime API and metrics.

``LocalMME`` is imported on first use, so that light submodules (``step_names``) load without the ASGI stack."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from conch.endpoint.local import ENDPOINT_NAME, LocalMME

__all__ = ["ENDPOINT_NAME", "LocalMME"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from conch.endpoint import local

        return getattr(local, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
