"""The SageMaker runtime API's error shapes, as boto3's ``sagemaker-runtime`` client parses them.

botocore reads the error code from the ``x-amzn-ErrorType`` header and the message from the JSON body's
``Message``; a ``ModelError`` (HTTP 424) also carries the container's own status and message.
"""

from __future__ import annotations

import json

from starlette.responses import Response

from conch.errors import ServeError

LOG_STREAM = "local: see the tritonserver log (conch serve --mme prints its path)"


class EndpointError(ServeError):
    """An invocation of the local MME failed; ``response()`` is what SageMaker's runtime API would answer."""

    code = "InternalFailure"
    status = 500

    def body(self) -> dict[str, object]:
        return {"ErrorCode": self.code, "Message": str(self)}

    def response(self) -> Response:
        return Response(json.dumps(self.body()), status_code=self.status, media_type="application/json",
                        headers={"x-amzn-ErrorType": self.code})


class ValidationError(EndpointError):
    """The request is wrong: no such endpoint or TargetModel, or an archive that cannot be served."""

    code = "ValidationError"
    status = 400


class ModelError(EndpointError):
    """The container (Triton) answered with an error, or a TargetModel failed to load."""

    code = "ModelError"
    status = 424

    def __init__(self, message: str, original_status: int, original_message: str) -> None:
        super().__init__(message)
        self.original_status = original_status
        self.original_message = original_message

    def body(self) -> dict[str, object]:
        kind = "CLIENT_ERROR_FROM_MODEL" if self.original_status < 500 else "INTERNAL_FAILURE_FROM_MODEL"
        return {"ErrorCode": kind, "Message": str(self), "OriginalStatusCode": self.original_status,
                "OriginalMessage": self.original_message, "LogStreamArn": LOG_STREAM}


class ModelNotReady(EndpointError):
    """The TargetModel is still downloading or loading past SageMaker's wait; its load goes on (botocore's
    ``ModelNotReadyException``, HTTP 429, which boto3's retry modes retry)."""

    code = "ModelNotReadyException"
    status = 429


# SageMaker's answer to an invocation its container did not answer in time (aws/amazon-sagemaker-examples#799:
# ModelError, HTTP 424, "Received server error (0)"); the container is "primary" in current answers
TIMED_OUT = ("Your invocation timed out while waiting for a response from container primary. Review the latency "
             "metrics for each container in Amazon CloudWatch, resolve the issue, and try again.")


def timed_out(target_model: str, seconds: float) -> ModelError:
    """SageMaker's ModelError for an invocation of ``target_model`` not answered within ``seconds``."""
    return ModelError(f"Received server error (0) from primary with message \"{TIMED_OUT}\" (local: TargetModel "
                      f"{target_model!r} gave no answer within {seconds:g} s, the invocation timeout)", 0, TIMED_OUT)


# The message is conch's: SageMaker's answer to a container response over InvokeEndpoint's 6 MB is not published
TOO_LARGE = "The response from container primary is larger than the 6 MB InvokeEndpoint returns."


def answer_too_large(target_model: str, detail: str) -> ModelError:
    """A ModelError for an answer of ``target_model`` past the size SageMaker passes on (``detail``: Triton's)."""
    return ModelError(f"Received server error (0) from primary with message \"{TOO_LARGE}\" (local: TargetModel "
                      f"{target_model!r} answered {detail})", 0, TOO_LARGE)


def model_error(target_model: str, status: int, message: str) -> ModelError:
    """Triton answered an invocation of ``target_model`` with ``status``: SageMaker's ModelError for it."""
    side = "client" if status < 500 else "server"
    return ModelError(f"Received {side} error ({status}) from model {target_model!r} with message {message!r}",
                      status, message)
