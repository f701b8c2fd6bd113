"""Autoscaling of an MME's production variant: a scalable target on its instance count and one
target-tracking policy, on invocations per instance or on the GPU utilisation of its instances."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from conch.aws import AwsTarget, aws_errors
from conch.errors import DeployError

NAMESPACE = "sagemaker"
DIMENSION = "sagemaker:variant:DesiredInstanceCount"
POLICY_PREFIX = "conch-"
METRICS = ("invocations", "gpu")
DEFAULT_GPU_TARGET = 60.0  # percent; AWS's GPU MME example (seed 001)
DEFAULT_SCALE_IN_COOLDOWN_S = 600
DEFAULT_SCALE_OUT_COOLDOWN_S = 200


def resource_id(endpoint: str, variant: str) -> str:
    return f"endpoint/{endpoint}/variant/{variant}"


@dataclass(frozen=True)
class Autoscaling:
    """Scale the variant between ``min_instances`` and ``max_instances`` to hold ``metric`` at
    ``target_value``: invocations per instance per minute, or GPU utilisation in percent."""

    max_instances: int
    metric: str = "gpu"
    target_value: float | None = None
    min_instances: int = 1
    scale_in_cooldown: int = DEFAULT_SCALE_IN_COOLDOWN_S
    scale_out_cooldown: int = DEFAULT_SCALE_OUT_COOLDOWN_S

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise DeployError(f"scale-on {self.metric!r}: use {' or '.join(METRICS)}")
        if self.min_instances < 1:
            raise DeployError(
                f"min instances {self.min_instances}: a real-time endpoint keeps at least one instance; use 1 or more"
            )
        if self.max_instances < self.min_instances:
            raise DeployError(f"max instances {self.max_instances} is below min instances {self.min_instances}")
        if self.target_value is None:
            if self.metric == "invocations":
                raise DeployError(
                    "scaling on invocations needs --target-value: the invocations per minute one instance "
                    "should serve (measure it with a load test of your ensembles)"
                )
            object.__setattr__(self, "target_value", DEFAULT_GPU_TARGET)
        target = float(self.target_value or 0)
        if target <= 0 or (self.metric == "gpu" and target > 100):
            raise DeployError(f"target value {self.target_value}: give a positive number (GPU: a percentage up to 100)")
        if self.scale_in_cooldown < 0 or self.scale_out_cooldown < 0:
            raise DeployError("cooldowns are seconds and cannot be negative")

    @classmethod
    def for_instance_type(cls, instance_type: str, max_instances: int, metric: str | None = None,
                          **settings: Any) -> Autoscaling:
        """Autoscaling on ``metric``, by default GPU utilisation on GPU instances and invocations elsewhere."""
        from conch.sagemaker.instances import gpus

        return cls(max_instances=max_instances, metric=metric or ("gpu" if gpus(instance_type) else "invocations"),
                   **settings)

    @property
    def target_unit(self) -> str:
        return "GPUUtilization %" if self.metric == "gpu" else "invocations per instance per minute"

    @property
    def policy_name(self) -> str:
        return f"{POLICY_PREFIX}{self.metric}"

    def policy_configuration(self, endpoint: str, variant: str) -> dict[str, Any]:
        """The ``TargetTrackingScalingPolicyConfiguration`` of ``put_scaling_policy``."""
        config: dict[str, Any] = {
            "TargetValue": float(self.target_value or 0),
            "ScaleInCooldown": self.scale_in_cooldown,
            "ScaleOutCooldown": self.scale_out_cooldown,
        }
        if self.metric == "invocations":
            config["PredefinedMetricSpecification"] = {"PredefinedMetricType": "SageMakerVariantInvocationsPerInstance"}
        else:
            config["CustomizedMetricSpecification"] = {
                "MetricName": "GPUUtilization",
                "Namespace": "/aws/sagemaker/Endpoints",
                "Dimensions": [
                    {"Name": "EndpointName", "Value": endpoint},
                    {"Name": "VariantName", "Value": variant},
                ],
                "Statistic": "Average",
                "Unit": "Percent",
            }
        return config


def apply_autoscaling(aws: AwsTarget, endpoint: str, variant: str, scaling: Autoscaling) -> str:
    """Register the variant as a scalable target and put the policy; conch's policies on other metrics go.

    The endpoint must be InService. Returns the policy ARN."""
    aas = aws.client("application-autoscaling")
    resource = resource_id(endpoint, variant)
    with aws_errors(f"registering {resource} for autoscaling",
                    "the credentials need application-autoscaling:* and iam:CreateServiceLinkedRole"):
        aas.register_scalable_target(
            ServiceNamespace=NAMESPACE, ResourceId=resource, ScalableDimension=DIMENSION,
            MinCapacity=scaling.min_instances, MaxCapacity=scaling.max_instances,
        )
    with aws_errors(f"putting scaling policy {scaling.policy_name!r} on {resource}"):
        for policy in _policies(aas, resource):
            if policy["PolicyName"].startswith(POLICY_PREFIX) and policy["PolicyName"] != scaling.policy_name:
                aas.delete_scaling_policy(PolicyName=policy["PolicyName"], ServiceNamespace=NAMESPACE,
                                          ResourceId=resource, ScalableDimension=DIMENSION)
        response = aas.put_scaling_policy(
            PolicyName=scaling.policy_name, ServiceNamespace=NAMESPACE, ResourceId=resource,
            ScalableDimension=DIMENSION, PolicyType="TargetTrackingScaling",
            TargetTrackingScalingPolicyConfiguration=scaling.policy_configuration(endpoint, variant),
        )
    return str(response["PolicyARN"])


def scalable_target(aws: AwsTarget, endpoint: str, variant: str) -> dict[str, Any] | None:
    """The variant's scalable target, or None when autoscaling does not manage it."""
    aas = aws.client("application-autoscaling")
    with aws_errors(f"describing the autoscaling of {resource_id(endpoint, variant)}"):
        found = aas.describe_scalable_targets(
            ServiceNamespace=NAMESPACE, ResourceIds=[resource_id(endpoint, variant)], ScalableDimension=DIMENSION,
        ).get("ScalableTargets", [])
    return dict(found[0]) if found else None


def deregister(aws: AwsTarget, endpoint: str, variant: str) -> bool:
    """Remove the variant's scalable target (and with it its policies); False if there was none."""
    if scalable_target(aws, endpoint, variant) is None:
        return False
    aas = aws.client("application-autoscaling")
    with aws_errors(f"deregistering {resource_id(endpoint, variant)} from autoscaling"):
        aas.deregister_scalable_target(ServiceNamespace=NAMESPACE, ResourceId=resource_id(endpoint, variant),
                                       ScalableDimension=DIMENSION)
    return True


def _policies(aas: Any, resource: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = aas.describe_scaling_policies(
        ServiceNamespace=NAMESPACE, ResourceId=resource, ScalableDimension=DIMENSION,
    ).get("ScalingPolicies", [])
    return found
