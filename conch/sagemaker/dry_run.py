"""`conch deploy --dry-run`: the deploy runs as usual, but every AWS client is a planner that records the
call with its arguments, checks them against the service's API model (botocore's, offline), and answers
as an account would where the bucket exists and nothing else does yet. No request leaves the process."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conch.aws import AwsTarget
from conch.errors import DeployError

_ABSENT = {  # reads that find nothing on a fresh account: (error code, message)
    "head_object": ("404", "Not Found"),
    "describe_model": ("ValidationException", "Could not find model"),
    "describe_endpoint_config": ("ValidationException", "Could not find endpoint configuration"),
    "describe_endpoint": ("ValidationException", "Could not find endpoint"),
    "describe_inference_component": ("ValidationException", "Could not find inference component"),
}
_EMPTY = {
    "list_models": "Models", "list_endpoint_configs": "EndpointConfigs", "list_tags": "Tags",
    "list_objects_v2": "Contents",  # the archives under the prefix the fleet check reads: none on a fresh account
    "describe_scalable_targets": "ScalableTargets", "describe_scaling_policies": "ScalingPolicies",
    "list_inference_components": "InferenceComponents", "describe_alarms": "MetricAlarms",
}


@dataclass(frozen=True)
class PlannedCall:
    service: str
    operation: str
    params: dict[str, Any]
    read: bool

    def describe(self, index: int) -> str:
        head = f"{index:3}. {self.service} {self.operation}"
        if self.read:
            return f"{head} {json.dumps(self.params, sort_keys=True, default=str)}  (read)"
        body = json.dumps(self.params, sort_keys=True, indent=2, default=str).replace("\n", "\n     ")
        return f"{head}\n     {body}"


@dataclass(frozen=True)
class DryRunAws(AwsTarget):
    """An AwsTarget whose clients plan calls instead of making them."""

    calls: list[PlannedCall] = field(default_factory=list, compare=False)

    def client(self, service: str, *, read_timeout: float = 60.0) -> Any:
        return PlannedClient(service, self)

    def report(self) -> str:
        lines = [f"dry run: conch deploy would make these {len(self.calls)} AWS calls in {self.region} "
                 "(none was made; the plan assumes the bucket exists in that region and no archive, model, "
                 "endpoint config, endpoint or autoscaling of this endpoint exists yet; on an existing endpoint "
                 "unchanged archives are skipped and UpdateEndpoint replaces CreateEndpoint):"]
        lines += [call.describe(i + 1) for i, call in enumerate(self.calls)]
        return "\n".join(lines)


class PlannedClient:
    """Stands where a boto3 client would: every method records its call and answers from the plan."""

    def __init__(self, service: str, aws: DryRunAws) -> None:
        import botocore.session
        from botocore import xform_name

        self.service, self.aws = service, aws
        self.model = botocore.session.get_session().get_service_model(service)
        self.operations = {xform_name(op): op for op in self.model.operation_names}

    def __getattr__(self, method: str) -> Any:
        if method == "upload_file":
            return self._upload_file
        if method not in self.operations:
            raise AttributeError(f"{self.service} has no operation {method!r}")

        def call(**params: Any) -> Any:
            self._record(self.operations[method], params, method.startswith(("head_", "describe_", "list_", "get_")))
            return self._answer(method, params)

        return call

    def _record(self, operation: str, params: dict[str, Any], read: bool) -> None:
        from botocore.exceptions import ParamValidationError
        from botocore.validate import validate_parameters

        try:
            validate_parameters(params, self.model.operation_model(operation).input_shape)
        except ParamValidationError as exc:
            detail = " ".join(str(exc).split())
            raise DeployError(f"dry run: AWS would refuse {self.service} {operation}: {detail}") from None
        self.aws.calls.append(PlannedCall(self.service, operation, params, read))

    def _answer(self, method: str, params: dict[str, Any]) -> Any:
        from botocore.exceptions import ClientError

        created = [c for c in self.aws.calls if c.operation == "CreateEndpoint"]
        if method == "describe_endpoint" and created:
            return {"EndpointName": params["EndpointName"], "EndpointStatus": "InService",
                    "EndpointConfigName": created[-1].params["EndpointConfigName"]}
        planned = [c for c in self.aws.calls if c.operation == "CreateInferenceComponent"
                   and c.params["InferenceComponentName"] == params.get("InferenceComponentName")]
        if method == "describe_inference_component" and planned:
            return {"InferenceComponentName": params["InferenceComponentName"], "InferenceComponentStatus": "InService",
                    "EndpointName": planned[-1].params["EndpointName"]}
        if method in _ABSENT:
            code, message = _ABSENT[method]
            error = {"Error": {"Code": code, "Message": f"{message} (dry run)"},
                     "ResponseMetadata": {"HTTPStatusCode": 404 if code == "404" else 400}}
            raise ClientError(error, self.operations[method])
        if method == "head_bucket":
            return {"BucketRegion": self.aws.region, "ResponseMetadata": {"HTTPHeaders": {}}}
        if method in _EMPTY:
            return {_EMPTY[method]: []}
        if method == "put_scaling_policy":
            return {"PolicyARN": f"arn:aws:autoscaling:{self.aws.region}:<account>:scalingPolicy:(dry run)"}
        return {}

    def _upload_file(self, filename: str, bucket: str, key: str, Config: Any = None,
                     ExtraArgs: dict[str, Any] | None = None) -> None:
        size = Path(filename).stat().st_size
        threshold = getattr(Config, "multipart_threshold", None)
        params = {"Bucket": bucket, "Key": key, **(ExtraArgs or {})}
        if threshold is not None and size >= threshold:
            parts = -(-size // Config.multipart_chunksize)
            self._record("CreateMultipartUpload", params, False)
            self.aws.calls.append(PlannedCall("s3", f"UploadPart x {parts}", {"Body": f"{filename} ({size} bytes)"},
                                              False))
            self._record("CompleteMultipartUpload", {"Bucket": bucket, "Key": key, "UploadId": "(from above)"}, False)
            return
        self._record("PutObject", {**params, "Body": f"{filename} ({size} bytes)"}, False)
