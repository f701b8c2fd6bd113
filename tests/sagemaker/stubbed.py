"""Real boto3 clients behind botocore's Stubber: every call conch makes is checked against the service model
(botocore validates the parameters before the Stubber answers), against the parameters a test expects, and
answered with what the test queued. No request leaves the process."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from botocore import xform_name
from botocore.stub import Stubber

from conch.aws import AwsTarget

REGION = "us-east-1"


def real_client(service: str) -> Any:
    import boto3

    return boto3.session.Session().client(service, region_name=REGION, aws_access_key_id="stub",
                                          aws_secret_access_key="stub")


def send_through_stubber(service: str, operation: str, params: dict[str, Any]) -> None:
    """Make the call on a real client; botocore validates ``params`` (ParamValidationError if wrongly shaped), the
    Stubber checks they arrived unchanged and answers with an error, so nothing is sent."""
    from botocore.exceptions import ClientError

    client = real_client(service)
    method = xform_name(operation)
    with Stubber(client) as stubber:
        stubber.add_client_error(method, service_error_code="Stubbed", expected_params=params)
        try:
            getattr(client, method)(**params)
        except ClientError as exc:
            assert exc.response["Error"]["Code"] == "Stubbed"
        stubber.assert_no_pending_responses()


@dataclass(frozen=True)
class StubbedAws(AwsTarget):
    """An AwsTarget whose clients are real boto3 clients with a Stubber each (one per service, kept)."""

    clients: dict[str, tuple[Any, Stubber]] = field(default_factory=dict, compare=False)

    def client(self, service: str, *, read_timeout: float = 60.0) -> Any:
        return self.stub(service)[0]

    def stub(self, service: str) -> tuple[Any, Stubber]:
        if service not in self.clients:
            client = real_client(service)
            stubber = Stubber(client)
            stubber.activate()
            self.clients[service] = (client, stubber)
        return self.clients[service]

    def answer(self, service: str, method: str, response: dict[str, Any], params: dict[str, Any] | None = None) -> None:
        self.stub(service)[1].add_response(method, response, params)

    def missing(self, service: str, method: str, params: dict[str, Any] | None = None) -> None:
        self.stub(service)[1].add_client_error(method, "ValidationException", "Could not find it",
                                               expected_params=params)

    def all_answered(self) -> None:
        for _, stubber in self.clients.values():
            stubber.assert_no_pending_responses()
