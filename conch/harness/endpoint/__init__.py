"""A local SageMaker multi-model endpoint: many archives behind one endpoint on this machine, downloaded on
first use, loaded once, unloaded least-recently-used first, with SageMaker's runtime API and metrics."""

from conch.harness.endpoint.local import ENDPOINT_NAME, LocalMME

__all__ = ["ENDPOINT_NAME", "LocalMME"]
