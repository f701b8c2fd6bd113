"""Autoscaling of the MME's variant as Application Auto Scaling (moto's server) stores it."""

from __future__ import annotations

import pytest
from conftest import Moto, spec

from conch import DeployError
from conch.sagemaker.autoscaling import Autoscaling, apply_autoscaling, deregister, scalable_target
from conch.sagemaker.endpoint import deploy_endpoint

pytestmark = pytest.mark.integration

RESOURCE = "endpoint/text-mme/variant/AllTraffic"
DIMENSION = "sagemaker:variant:DesiredInstanceCount"


@pytest.fixture
def endpoint(moto: Moto) -> str:
    deploy_endpoint(spec(), moto.aws, poll=0.01)
    return "text-mme"


def _policies(moto: Moto) -> list[dict[str, object]]:
    found: list[dict[str, object]] = moto.client("application-autoscaling").describe_scaling_policies(
        ServiceNamespace="sagemaker", ResourceId=RESOURCE)["ScalingPolicies"]
    return found


def test_gpu_utilisation_policy_as_in_the_aws_example(moto: Moto, endpoint: str) -> None:
    arn = apply_autoscaling(moto.aws, endpoint, "AllTraffic", Autoscaling(min_instances=1, max_instances=4))
    (target,) = moto.client("application-autoscaling").describe_scalable_targets(
        ServiceNamespace="sagemaker")["ScalableTargets"]
    assert (target["ResourceId"], target["ScalableDimension"]) == (RESOURCE, DIMENSION)
    assert (target["MinCapacity"], target["MaxCapacity"]) == (1, 4)

    (policy,) = _policies(moto)
    assert policy["PolicyARN"] == arn and policy["PolicyName"] == "conch-gpu"
    assert policy["PolicyType"] == "TargetTrackingScaling" and policy["ScalableDimension"] == DIMENSION
    assert policy["TargetTrackingScalingPolicyConfiguration"] == {
        "TargetValue": 60.0,
        "CustomizedMetricSpecification": {
            "MetricName": "GPUUtilization",
            "Namespace": "/aws/sagemaker/Endpoints",
            "Dimensions": [
                {"Name": "EndpointName", "Value": "text-mme"},
                {"Name": "VariantName", "Value": "AllTraffic"},
            ],
            "Statistic": "Average",
            "Unit": "Percent",
        },
        "ScaleInCooldown": 600,
        "ScaleOutCooldown": 200,
    }


def test_invocations_policy_replaces_the_gpu_one(moto: Moto, endpoint: str) -> None:
    apply_autoscaling(moto.aws, endpoint, "AllTraffic", Autoscaling(max_instances=4))
    scaling = Autoscaling(min_instances=2, max_instances=6, metric="invocations", target_value=250,
                          scale_in_cooldown=300, scale_out_cooldown=60)
    apply_autoscaling(moto.aws, endpoint, "AllTraffic", scaling)
    (policy,) = _policies(moto)
    assert policy["PolicyName"] == "conch-invocations"
    assert policy["TargetTrackingScalingPolicyConfiguration"] == {
        "TargetValue": 250.0,
        "PredefinedMetricSpecification": {"PredefinedMetricType": "SageMakerVariantInvocationsPerInstance"},
        "ScaleInCooldown": 300,
        "ScaleOutCooldown": 60,
    }
    target = scalable_target(moto.aws, endpoint, "AllTraffic")
    assert target is not None and (target["MinCapacity"], target["MaxCapacity"]) == (2, 6)


def test_deregister_removes_target_and_policy(moto: Moto, endpoint: str) -> None:
    apply_autoscaling(moto.aws, endpoint, "AllTraffic", Autoscaling(max_instances=2))
    assert deregister(moto.aws, endpoint, "AllTraffic") is True
    assert scalable_target(moto.aws, endpoint, "AllTraffic") is None
    assert deregister(moto.aws, endpoint, "AllTraffic") is False


def test_undeploy_removes_the_autoscaling_too(moto: Moto, endpoint: str) -> None:
    from conch.sagemaker.endpoint import delete_endpoint

    apply_autoscaling(moto.aws, endpoint, "AllTraffic", Autoscaling(max_instances=2))
    deleted = delete_endpoint(endpoint, moto.aws)
    assert deleted[0] == "autoscaling of text-mme/AllTraffic"
    assert scalable_target(moto.aws, endpoint, "AllTraffic") is None


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"max_instances": 4, "metric": "invocations"}, "scaling on invocations needs --target-value"),
    ({"max_instances": 4, "min_instances": 0}, "a real-time endpoint keeps at least one instance"),
    ({"max_instances": 1, "min_instances": 2}, "max instances 1 is below min instances 2"),
    ({"max_instances": 4, "target_value": 120}, "a percentage up to 100"),
    ({"max_instances": 4, "metric": "cpu"}, "scale-on 'cpu': use invocations or gpu"),
    ({"max_instances": 4, "scale_in_cooldown": -1}, "cooldowns are seconds and cannot be negative"),
])
def test_scaling_settings_aws_would_refuse_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(DeployError, match=message):
        Autoscaling(**kwargs)  # type: ignore[arg-type]
