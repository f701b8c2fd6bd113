"""Autoscaling of an inference component's copy count, with scale to zero, as AWS documents it ("Scale an
endpoint to zero instances", SageMaker developer guide):

- a scalable target ``inference-component/<name>`` on ``sagemaker:inference-component:DesiredCopyCount``
  between ``min_copies`` (0 allowed) and ``max_copies``;
- a target-tracking policy on the predefined ``SageMakerInferenceComponentInvocationsPerCopy``;
- with ``min_copies`` 0, a step-scaling policy (+1 copy) fired by a CloudWatch alarm on the component's
  ``NoCapacityInvocationFailures`` (namespace ``AWS/SageMaker``, dimension ``InferenceComponentName``): target
  tracking cannot scale out from zero copies, since no copy counts invocations.

The requests are built by pure functions; :func:`apply_component_scaling` sends them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from conch.aws import AwsTarget, aws_errors
from conch.errors import DeployError

NAMESPACE = "sagemaker"
DIMENSION = "sagemaker:inference-component:DesiredCopyCount"
METRIC = "SageMakerInferenceComponentInvocationsPerCopy"
NO_CAPACITY_METRIC = "NoCapacityInvocationFailures"
TRACKING_POLICY = "conch-invocations-per-copy"
FROM_ZERO_POLICY = "conch-out-from-zero"


def resource_id(component: str) -> str:
    return f"inference-component/{component}"


def alarm_name(component: str) -> str:
    return f"conch-{component}-no-capacity"


@dataclass(frozen=True)
class CopyScaling:
    """Hold invocations per copy per minute at ``target_value`` between ``min_copies`` and ``max_copies``."""

    max_copies: int
    target_value: float
    min_copies: int = 0
    scale_in_cooldown: int = 300
    scale_out_cooldown: int = 60
    from_zero_cooldown: int = 60

    def __post_init__(self) -> None:
        if not 0 <= self.min_copies <= self.max_copies or self.max_copies < 1:
            raise DeployError(f"copies {self.min_copies}..{self.max_copies}: give 0 <= --min-copies <= --max-copies "
                              "and at least one copy at most")
        if not self.target_value > 0:
            raise DeployError(f"target value {self.target_value:g}: give the invocations per copy per minute one "
                              "copy should serve (a positive number)")

    def requests(self, component: str) -> list[tuple[str, str, dict[str, Any]]]:
        """Every call, in order: (service, boto3 method, parameters). The step policy's ARN, which the alarm
        names, is filled in by the caller from the policy's answer (``PolicyARN`` here is a placeholder)."""
        target = {"ServiceNamespace": NAMESPACE, "ResourceId": resource_id(component), "ScalableDimension": DIMENSION}
        calls: list[tuple[str, str, dict[str, Any]]] = [
            ("application-autoscaling", "register_scalable_target",
             {**target, "MinCapacity": self.min_copies, "MaxCapacity": self.max_copies}),
            ("application-autoscaling", "put_scaling_policy", {
                **target, "PolicyName": TRACKING_POLICY, "PolicyType": "TargetTrackingScaling",
                "TargetTrackingScalingPolicyConfiguration": {
                    "PredefinedMetricSpecification": {"PredefinedMetricType": METRIC},
                    "TargetValue": float(self.target_value),
                    "ScaleInCooldown": self.scale_in_cooldown, "ScaleOutCooldown": self.scale_out_cooldown}}),
        ]
        if self.min_copies > 0:
            return calls
        calls.append(("application-autoscaling", "put_scaling_policy", {
            **target, "PolicyName": FROM_ZERO_POLICY, "PolicyType": "StepScaling",
            "StepScalingPolicyConfiguration": {
                "AdjustmentType": "ChangeInCapacity", "MetricAggregationType": "Maximum",
                "Cooldown": self.from_zero_cooldown,
                "StepAdjustments": [{"MetricIntervalLowerBound": 0.0, "ScalingAdjustment": 1}]}}))
        calls.append(("cloudwatch", "put_metric_alarm", no_capacity_alarm(component, "<PolicyARN>")))
        return calls


def no_capacity_alarm(component: str, policy_arn: str) -> dict[str, Any]:
    """The alarm that scales a component out from zero: any refused call in 30 s fires the step policy."""
    return {
        "AlarmName": alarm_name(component),
        "AlarmActions": [policy_arn],
        "MetricName": NO_CAPACITY_METRIC,
        "Namespace": "AWS/SageMaker",
        "Statistic": "Maximum",
        "Dimensions": [{"Name": "InferenceComponentName", "Value": component}],
        "Period": 30,
        "EvaluationPeriods": 1,
        "DatapointsToAlarm": 1,
        "Threshold": 1.0,
        "ComparisonOperator": "GreaterThanOrEqualToThreshold",
        "TreatMissingData": "missing",
    }


def apply_component_scaling(aws: AwsTarget, component: str, scaling: CopyScaling) -> list[str]:
    """Send :meth:`CopyScaling.requests`; the policies' ARNs."""
    arns: list[str] = []
    for service, method, params in scaling.requests(component):
        if method == "put_metric_alarm":
            params = no_capacity_alarm(component, arns[-1])
        with aws_errors(f"autoscaling inference component {component!r} ({method})",
                        "the credentials need application-autoscaling:*, cloudwatch:PutMetricAlarm and "
                        "iam:CreateServiceLinkedRole"):
            answer = getattr(aws.client(service), method)(**params)
        if method == "put_scaling_policy":
            arns.append(str(answer["PolicyARN"]))
    return arns


def remove_component_scaling(aws: AwsTarget, component: str) -> list[str]:
    """Delete the component's alarm and scalable target (its policies go with it); what was removed."""
    removed: list[str] = []
    cloudwatch = aws.client("cloudwatch")
    with aws_errors(f"removing the no-capacity alarm of {component!r}"):
        if cloudwatch.describe_alarms(AlarmNames=[alarm_name(component)]).get("MetricAlarms"):
            cloudwatch.delete_alarms(AlarmNames=[alarm_name(component)])
            removed.append(f"alarm {alarm_name(component)}")
    aas = aws.client("application-autoscaling")
    target = {"ServiceNamespace": NAMESPACE, "ScalableDimension": DIMENSION}
    with aws_errors(f"deregistering {resource_id(component)} from autoscaling"):
        found = aas.describe_scalable_targets(ResourceIds=[resource_id(component)], **target).get("ScalableTargets")
        if found:
            aas.deregister_scalable_target(ResourceId=resource_id(component), **target)
            removed.append(f"autoscaling of {resource_id(component)}")
    return removed
