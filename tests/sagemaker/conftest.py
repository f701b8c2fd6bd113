"""A real S3/SageMaker-compatible server (moto in server mode) on 127.0.0.1 for the deploy tests, fake
credentials, and a guard that no test reaches anything but that server."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx
import pytest

from conch.aws import AwsTarget
from conch.builder.repository_build import build_ensemble
from conch.sagemaker.endpoint import EndpointSpec
from conch.sagemaker.images import triton_image


def _root_conftest() -> Any:
    """tests/conftest.py under another name. pytest imports every conftest.py without an __init__.py as the
    module ``conftest``, so this one replaces the root one in sys.modules; re-exporting its helpers keeps
    ``from conftest import linear_ensemble`` working in test modules collected after this folder."""
    path = Path(__file__).parents[1] / "conftest.py"
    spec = importlib.util.spec_from_file_location("conch_tests_conftest", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_ROOT = _root_conftest()
linear_ensemble, half_ensemble, REFUSED_URL = _ROOT.linear_ensemble, _ROOT.half_ensemble, _ROOT.REFUSED_URL
EXAMPLE_FILES, ExampleArchives, ready_line = _ROOT.EXAMPLE_FILES, _ROOT.ExampleArchives, _ROOT.ready_line

REGION = "us-east-1"
ACCOUNT = "123456789012"  # moto's default account
ROLE = f"arn:aws:iam::{ACCOUNT}:role/SageMakerExecution"
INSTANCE = "ml.g4dn.xlarge"  # moto 5.2's list of instance types predates g5

FAKE_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": REGION,
    "AWS_REGION": REGION,
    "AWS_CONFIG_FILE": "/dev/null",
    "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
    "AWS_EC2_METADATA_DISABLED": "true",
    "NO_PROXY": "127.0.0.1,localhost",
    "no_proxy": "127.0.0.1,localhost",
}


def spec(**changes: Any) -> EndpointSpec:
    """The MME most tests deploy: text-mme over s3://conch-models/mme/, 24.10 image, one GPU instance."""
    fields: dict[str, Any] = {
        "name": "text-mme", "role_arn": ROLE, "model_data_url": "s3://conch-models/mme/",
        "image": triton_image("24.10", REGION), "instance_type": INSTANCE,
        "environment": {"SAGEMAKER_TRITON_LOG_VERBOSE": "true"},
    }
    return EndpointSpec(**{**fields, **changes})


@dataclass
class Moto:
    """The server's URL, an AwsTarget pointing at it, and every AWS call conch's clients made."""

    url: str
    aws: AwsTarget
    calls: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)

    def client(self, service: str) -> Any:
        import boto3

        return boto3.client(service, region_name=REGION, endpoint_url=self.url)

    def called(self, operation: str) -> list[dict[str, Any]]:
        return [params for _, op, params in self.calls if op == operation]


Calls = list[tuple[str, str, dict[str, Any]]]


@pytest.fixture(autouse=True)
def aws_calls(monkeypatch: pytest.MonkeyPatch) -> Calls:
    """Every test here: fake credentials, no profile or proxy, and conch's AWS clients held to 127.0.0.1
    (a client for anything else fails the test); each call a client makes is recorded."""
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    for name, value in FAKE_ENV.items():
        monkeypatch.setenv(name, value)
    calls: Calls = []
    original = AwsTarget.client

    def loopback_client(self: AwsTarget, service: str, **kwargs: Any) -> Any:
        host = urlparse(self.endpoint_url or "").hostname
        assert host == "127.0.0.1", f"a test tried to reach {self.endpoint_url or 'AWS'} for {service}"
        client = original(self, service, **kwargs)

        def record(params: dict[str, Any], model: Any, **_: Any) -> None:
            calls.append((service, model.name, dict(params)))

        client.meta.events.register("provide-client-params.*.*", record)
        return client

    monkeypatch.setattr(AwsTarget, "client", loopback_client)
    return calls


@pytest.fixture
def moto(moto_server: str, aws_calls: Calls, monkeypatch: pytest.MonkeyPatch) -> Moto:
    """moto's server with its state reset, and an AwsTarget pointing at it."""
    # Any client that somehow got no endpoint_url (also in `conch` subprocesses) still lands on moto.
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_server)
    httpx.post(f"{moto_server}/moto-api/reset", timeout=10).raise_for_status()
    return Moto(moto_server, AwsTarget(REGION, moto_server), aws_calls)


@pytest.fixture
def bucket(moto: Moto) -> str:
    moto.client("s3").create_bucket(Bucket="conch-models")
    return "conch-models"


@pytest.fixture
def archives(tmp_path: Path) -> list[Path]:
    """Two real production archives built by conch."""
    out = tmp_path / "dist"
    return [build_ensemble(linear_ensemble(name), out, "production") for name in ("linear_a", "linear_b")]
