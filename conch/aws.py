"""boto3 clients for conch's deploy commands and the local MME's ``s3://`` sources, the region they act in, and
AWS errors as DeployErrors. Below conch.sagemaker and conch.endpoint, which both take AwsTarget from here.

boto3 is imported inside functions, so ``import conch`` stays fast for users who never deploy.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from conch.errors import DeployError

LOOPBACK_REGION = "us-east-1"


def is_loopback(url: str | None) -> bool:
    """Whether ``url`` points at this machine (127.0.0.0/8, ::1 or localhost)."""
    host = urlparse(url or "").hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def endpoint_url_problem(url: str | None) -> str | None:
    """Why boto3 would refuse ``url`` as an endpoint (it raises a bare ValueError when the client is made), or
    None when it is a URL it takes (or no URL)."""
    if not url:
        return None
    parts = urlparse(url)
    if parts.scheme in ("http", "https") and parts.hostname:
        return None
    return f"endpoint URL {url!r}: give it with its scheme and host, e.g. http://127.0.0.1:5000"


@dataclass(frozen=True)
class AwsTarget:
    """Where the deploy calls go: a region and, for S3/SageMaker-compatible servers (moto), one URL for
    every service instead of the AWS endpoints."""

    region: str
    endpoint_url: str | None = None

    def __post_init__(self) -> None:
        problem = endpoint_url_problem(self.endpoint_url)
        if problem:
            raise DeployError(problem)

    @classmethod
    def resolve(cls, region: str | None = None, endpoint_url: str | None = None) -> AwsTarget:
        """The given region, or the one the AWS configuration names (``AWS_REGION``, profile)."""
        if not region:
            import boto3

            region = boto3.session.Session().region_name
        if not region and is_loopback(endpoint_url):
            region = LOOPBACK_REGION  # a local server (the local MME, moto) answers in any region
        if not region:
            raise DeployError(
                "no AWS region: pass --region (e.g. us-east-1) or set AWS_REGION / a profile's region"
            )
        return cls(region, endpoint_url or None)

    def client(self, service: str, *, read_timeout: float = 60.0) -> Any:
        """A boto3 client for ``service`` in this region (at ``endpoint_url`` when one is given)."""
        import boto3
        from botocore.config import Config

        config = Config(
            region_name=self.region,
            retries={"mode": "standard", "max_attempts": 4},
            connect_timeout=10,
            read_timeout=read_timeout,
        )
        session = boto3.session.Session()
        if is_loopback(self.endpoint_url) and session.get_credentials() is None:
            # A server on this machine (the local MME, moto) needs a signature, not real credentials.
            return session.client(service, endpoint_url=self.endpoint_url, config=config,
                                  aws_access_key_id="local", aws_secret_access_key="local")
        return session.client(service, endpoint_url=self.endpoint_url, config=config)


def error_code(exc: BaseException) -> str:
    """The AWS error code of a botocore ClientError (``''`` for anything else)."""
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return ""
    return str(response.get("Error", {}).get("Code", ""))


def error_message(exc: BaseException, limit: int = 400) -> str:
    """AWS's message, on one line and cut short (a misbehaving server may answer with a whole HTML page)."""
    response = getattr(exc, "response", None)
    text = str(exc)
    if isinstance(response, dict) and response.get("Error", {}).get("Message"):
        text = str(response["Error"]["Message"])
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."


def http_status(exc: BaseException) -> int:
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return 0
    return int(response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))


@contextmanager
def aws_errors(doing: str, denied_hint: str = "") -> Iterator[None]:
    """Turn botocore's exceptions raised while ``doing`` into a DeployError that says what failed;
    ``denied_hint`` says which permission is missing when AWS denies access.

    Errors a caller wants to handle itself (e.g. "not found") are caught inside this block."""
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, NoRegionError

    try:
        yield
    except NoCredentialsError:
        raise DeployError(
            f"{doing}: no AWS credentials found; configure them (aws configure, AWS_PROFILE, or "
            "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)"
        ) from None
    except NoRegionError:
        raise DeployError(f"{doing}: no AWS region; pass --region") from None
    except ClientError as exc:
        code = error_code(exc)
        detail = f"{doing}: {code or 'error'}: {error_message(exc)}"
        if code in ("AccessDenied", "AccessDeniedException", "UnauthorizedOperation") or http_status(exc) == 403:
            detail += f"; {denied_hint or 'the credentials in use lack a permission for this call'}"
        raise DeployError(detail) from None
    except BotoCoreError as exc:  # connection failures, timeouts, bad endpoint URLs
        raise DeployError(f"{doing}: {exc}") from None
