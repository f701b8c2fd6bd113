"""One SageMaker multi-model endpoint serving every archive under an S3 prefix: create, update, wait, delete.

SageMaker models and endpoint configs cannot change once created, so conch names each after a hash of
what it holds (``<endpoint>-<hash>``): deploying the same thing twice changes nothing, and deploying
something new creates a new model/config and moves the endpoint to it with ``update_endpoint``. conch tags
what it creates with ``conch:endpoint``, and only ever deletes resources carrying that tag.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from conch.aws import AwsTarget, aws_errors, error_message
from conch.errors import DeployError
from conch.sagemaker.instances import check_instance_type

DEFAULT_INSTANCE_TYPE = "ml.g5.xlarge"
DEFAULT_VARIANT = "AllTraffic"
DEFAULT_WAIT_TIMEOUT_S = 1800.0  # a GPU MME usually needs 5-10 minutes to come up
DEFAULT_POLL_S = 15.0
TAG_KEY = "conch:endpoint"
BUSY = ("Creating", "Updating", "SystemUpdating", "RollingBack", "UpdateRollbackFailed", "Deleting")

_NAME = re.compile(r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}")
_ROLE = re.compile(r"arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]+")

Progress = Callable[[str], None]


@dataclass(frozen=True)
class EndpointSpec:
    """What the endpoint runs: the Triton image in MultiModel mode over ``model_data_url``, on
    ``instance_count`` instances of ``instance_type`` in one production variant."""

    name: str
    role_arn: str
    model_data_url: str
    image: str
    instance_type: str = DEFAULT_INSTANCE_TYPE
    instance_count: int = 1
    variant: str = DEFAULT_VARIANT
    environment: Mapping[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        for what, value in (("endpoint name", self.name), ("variant name", self.variant)):
            if not _NAME.fullmatch(value):
                raise DeployError(
                    f"{what} {value!r}: SageMaker takes 1-63 letters, digits and hyphens, starting with a letter "
                    "or digit (no underscores or dots)"
                )
        if not _ROLE.fullmatch(self.role_arn):
            raise DeployError(
                f"role {self.role_arn!r}: give the ARN of the IAM role SageMaker assumes to pull the image and "
                "read the archives, e.g. arn:aws:iam::123456789012:role/SageMakerExecution"
            )
        if not self.model_data_url.startswith("s3://") or not self.model_data_url.endswith("/"):
            raise DeployError(f"model data URL {self.model_data_url!r}: an MME needs an S3 prefix ending in '/'")
        if self.instance_count < 1:
            raise DeployError(f"instance count {self.instance_count}: an endpoint needs at least one instance")
        object.__setattr__(self, "warnings", tuple(check_instance_type(self.instance_type)))

    def container(self) -> dict[str, Any]:
        return {
            "Image": self.image,
            "ModelDataUrl": self.model_data_url,
            "Mode": "MultiModel",
            "Environment": dict(sorted(self.environment.items())),
        }

    @property
    def model_name(self) -> str:
        return _named(self.name, {"container": self.container(), "role": self.role_arn})

    @property
    def config_name(self) -> str:
        return _named(self.name, {"model": self.model_name, "variants": self.production_variants()})

    def production_variants(self) -> list[dict[str, Any]]:
        return [{
            "VariantName": self.variant,
            "ModelName": self.model_name,
            "InstanceType": self.instance_type,
            "InitialInstanceCount": self.instance_count,
            "InitialVariantWeight": 1.0,
        }]


def _named(endpoint: str, content: Mapping[str, Any]) -> str:
    digest = hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:12]
    return f"{endpoint[:50].rstrip('-')}-{digest}"


@dataclass
class EndpointResult:
    """``action`` is ``created``, ``updated`` or ``unchanged``; ``status`` the last status seen."""

    name: str
    action: str
    model_name: str
    config_name: str
    status: str
    removed: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def deploy_endpoint(
    spec: EndpointSpec,
    aws: AwsTarget,
    *,
    wait: bool = True,
    timeout: float = DEFAULT_WAIT_TIMEOUT_S,
    poll: float = DEFAULT_POLL_S,
    progress: Progress | None = None,
) -> EndpointResult:
    """Create the endpoint, or move an existing one to ``spec``; with ``wait``, until it is InService."""
    say = progress or (lambda _: None)
    sm = aws.client("sagemaker")
    current = describe_endpoint(sm, spec.name)
    if current is not None:
        _check_updatable(current, spec)
    _ensure_model(sm, spec, say)
    _ensure_config(sm, spec, say)
    result = EndpointResult(spec.name, "created", spec.model_name, spec.config_name, "Creating")
    if current is None:
        say(f"creating endpoint {spec.name} ({spec.instance_count} x {spec.instance_type})")
        with aws_errors(f"creating endpoint {spec.name!r}"):
            sm.create_endpoint(EndpointName=spec.name, EndpointConfigName=spec.config_name, Tags=_tags(spec.name))
    elif current["EndpointConfigName"] == spec.config_name:
        result.action, result.status = "unchanged", current["EndpointStatus"]
        say(f"endpoint {spec.name} already runs {spec.config_name}")
    else:
        result.action, result.status = "updated", "Updating"
        result.notes += _before_update(aws, sm, current, spec, say)
        say(f"updating endpoint {spec.name}: {current['EndpointConfigName']} -> {spec.config_name}")
        with aws_errors(f"updating endpoint {spec.name!r} to config {spec.config_name!r}"):
            sm.update_endpoint(EndpointName=spec.name, EndpointConfigName=spec.config_name)
    if not wait:
        return result
    described = wait_in_service(sm, spec.name, timeout=timeout, poll=poll, expect_config=spec.config_name,
                                progress=say)
    result.status = described["EndpointStatus"]
    if current is not None and result.action == "updated":
        result.removed = _remove_unused(sm, spec.name, keep_config=spec.config_name, keep_model=spec.model_name)
    return result


def describe_endpoint(sm: Any, name: str) -> dict[str, Any] | None:
    """``describe_endpoint``, or None when there is no such endpoint."""
    return _described(sm.describe_endpoint, f"endpoint {name!r}", EndpointName=name)


def _described(describe: Any, what: str, **names: str) -> dict[str, Any] | None:
    """What a SageMaker ``describe_*`` call says of ``what``, or None when there is no such thing."""
    from botocore.exceptions import ClientError

    with aws_errors(f"describing {what}"):
        try:
            found: dict[str, Any] = describe(**names)
        except ClientError as exc:
            if _missing(exc):
                return None
            raise
    return found


def wait_in_service(
    sm: Any,
    name: str,
    *,
    timeout: float = DEFAULT_WAIT_TIMEOUT_S,
    poll: float = DEFAULT_POLL_S,
    expect_config: str | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Poll until the endpoint is InService (running ``expect_config`` if given); fail on Failed, a
    rolled-back update or the timeout, with SageMaker's reason and where its logs are."""
    deadline = time.monotonic() + timeout
    last = ""
    seen_busy = False
    while True:
        described = describe_endpoint(sm, name)
        if described is None:
            raise DeployError(f"endpoint {name!r} disappeared while waiting for it (deleted elsewhere?)")
        status = str(described["EndpointStatus"])
        reason = described.get("FailureReason", "")
        if status != last and progress:
            progress(f"endpoint {name}: {status}")
        last = status
        seen_busy = seen_busy or status in BUSY
        if status == "InService":
            if expect_config is None or described["EndpointConfigName"] == expect_config:
                return described
            if seen_busy:  # SageMaker rolls a failed update back to the previous config
                raise DeployError(
                    f"updating endpoint {name!r} to {expect_config!r} failed and SageMaker rolled back to "
                    f"{described['EndpointConfigName']!r}: {reason or 'no reason given'}{_logs(name)}"
                )
        elif status == "Failed":
            raise DeployError(f"endpoint {name!r} failed: {reason or 'no reason given'}{_logs(name)}")
        elif status not in BUSY:
            raise DeployError(f"endpoint {name!r} is {status}, not coming into service{_logs(name)}")
        if time.monotonic() >= deadline:
            raise DeployError(
                f"endpoint {name!r} is still {status} after {timeout:.0f} s; SageMaker carries on: watch it with "
                f"`aws sagemaker describe-endpoint --endpoint-name {name}`, or wait longer with --wait-timeout"
            )
        time.sleep(min(poll, max(0.0, deadline - time.monotonic())))  # the last look is at the deadline, not past it


def delete_endpoint(name: str, aws: AwsTarget, *, progress: Progress | None = None) -> list[str]:
    """Delete the endpoint, its autoscaling, and the configs and models conch made for it."""
    from conch.sagemaker.autoscaling import deregister

    say = progress or (lambda _: None)
    sm = aws.client("sagemaker")
    deleted: list[str] = []
    current = describe_endpoint(sm, name)
    if current is not None:
        config = _describe_config(sm, current["EndpointConfigName"])
        for variant in (config or {}).get("ProductionVariants", []):
            if deregister(aws, name, variant["VariantName"]):
                deleted.append(f"autoscaling of {name}/{variant['VariantName']}")
        with aws_errors(f"deleting endpoint {name!r}"):
            sm.delete_endpoint(EndpointName=name)
        deleted.append(f"endpoint {name}")
        say(f"deleting endpoint {name}")
    deleted += _remove_unused(sm, name, keep_config=None, keep_model=None)
    if not deleted:
        raise DeployError(
            f"nothing to undeploy: no endpoint {name!r} in {aws.region}, and no model or endpoint config conch "
            "made for it"
        )
    return deleted


def _check_updatable(current: Mapping[str, Any], spec: EndpointSpec) -> None:
    status = current["EndpointStatus"]
    if status == "Failed":
        raise DeployError(
            f"endpoint {spec.name!r} is Failed ({current.get('FailureReason') or 'no reason given'}) and SageMaker "
            f"cannot update a failed endpoint: `conch undeploy --endpoint {spec.name}`, then deploy again"
        )
    if status in BUSY and current["EndpointConfigName"] != spec.config_name:
        raise DeployError(
            f"endpoint {spec.name!r} is {status}; SageMaker takes one change at a time: wait until it is InService "
            "and deploy again"
        )


def _before_update(aws: AwsTarget, sm: Any, current: Mapping[str, Any], spec: EndpointSpec, say: Progress) -> list[str]:
    """SageMaker refuses to change the instance type of a variant that autoscaling manages: deregister it
    first (deploy registers it again when asked to)."""
    from conch.sagemaker.autoscaling import deregister

    old = _describe_config(sm, current["EndpointConfigName"]) or {}
    old_types = {v["VariantName"]: v.get("InstanceType") for v in old.get("ProductionVariants", [])}
    if old_types.get(spec.variant) in (None, spec.instance_type):
        return []
    if deregister(aws, spec.name, spec.variant):
        note = (f"removed the autoscaling of {spec.name}/{spec.variant} (its instance type changes from "
                f"{old_types[spec.variant]} to {spec.instance_type})")
        say(note)
        return [note]
    return []


def _ensure_model(sm: Any, spec: EndpointSpec, say: Progress) -> None:
    if _described(sm.describe_model, f"SageMaker model {spec.model_name!r}", ModelName=spec.model_name) is not None:
        return
    say(f"creating model {spec.model_name} (MultiModel, {spec.image}, {spec.model_data_url})")
    with aws_errors(f"creating SageMaker model {spec.model_name!r}", "the role must be passable (iam:PassRole)"):
        sm.create_model(ModelName=spec.model_name, ExecutionRoleArn=spec.role_arn, PrimaryContainer=spec.container(),
                        Tags=_tags(spec.name))


def _ensure_config(sm: Any, spec: EndpointSpec, say: Progress) -> None:
    if _describe_config(sm, spec.config_name) is not None:
        return
    say(f"creating endpoint config {spec.config_name} ({spec.instance_count} x {spec.instance_type}, "
        f"variant {spec.variant})")
    with aws_errors(f"creating endpoint config {spec.config_name!r}"):
        sm.create_endpoint_config(EndpointConfigName=spec.config_name, ProductionVariants=spec.production_variants(),
                                  Tags=_tags(spec.name))


def _describe_config(sm: Any, name: str) -> dict[str, Any] | None:
    return _described(sm.describe_endpoint_config, f"endpoint config {name!r}", EndpointConfigName=name)


def _remove_unused(sm: Any, endpoint: str, *, keep_config: str | None, keep_model: str | None) -> list[str]:
    """Delete the endpoint configs and models conch tagged for ``endpoint``, except the ones kept."""
    removed = []
    for kind, lister, key, arn_key, deleter, param in (
        ("endpoint config", sm.list_endpoint_configs, "EndpointConfigs", "EndpointConfigArn",
         sm.delete_endpoint_config, "EndpointConfigName"),
        ("model", sm.list_models, "Models", "ModelArn", sm.delete_model, "ModelName"),
    ):
        keep = keep_config if kind == "endpoint config" else keep_model
        with aws_errors(f"cleaning up the {kind}s conch made for endpoint {endpoint!r}"):
            for item in _listed(lister, key, f"{endpoint[:50].rstrip('-')}-"):
                name = item[param]
                if name == keep or not _tagged_for(sm, item[arn_key], endpoint):
                    continue
                deleter(**{param: name})
                removed.append(f"{kind} {name}")
    return removed


def _listed(lister: Callable[..., dict[str, Any]], key: str, contains: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    token: str | None = None
    while True:
        page = lister(NameContains=contains, MaxResults=100, **({"NextToken": token} if token else {}))
        items += page.get(key, [])
        token = page.get("NextToken")
        if not token:
            return items


def _tagged_for(sm: Any, arn: str, endpoint: str) -> bool:
    tags = sm.list_tags(ResourceArn=arn).get("Tags", [])
    return any(t["Key"] == TAG_KEY and t["Value"] == endpoint for t in tags)


def _tags(endpoint: str) -> list[dict[str, str]]:
    return [{"Key": TAG_KEY, "Value": endpoint}]


def _missing(exc: Exception) -> bool:
    """SageMaker answers "not found" for endpoints, configs and models with a ValidationException."""
    message = error_message(exc)
    return "Could not find" in message or "does not exist" in message or "not found" in message.lower()


def _logs(name: str) -> str:
    return f" (container logs: CloudWatch log group /aws/sagemaker/Endpoints/{name})"
