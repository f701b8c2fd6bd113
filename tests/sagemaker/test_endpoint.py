"""The MME's model, endpoint config and endpoint as a SageMaker-compatible server (moto) stores them."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import INSTANCE, REGION, ROLE, Moto, spec

from conch import DeployError
from conch.sagemaker.endpoint import TAG_KEY, delete_endpoint, deploy_endpoint, wait_in_service
from conch.sagemaker.images import triton_image

pytestmark = pytest.mark.integration

IMAGE = "785573368785.dkr.ecr.us-east-1.amazonaws.com/sagemaker-tritonserver:24.10-py3"


def test_create_stores_a_multimodel_container_over_the_prefix(moto: Moto) -> None:
    result = deploy_endpoint(spec(), moto.aws, poll=0.01)
    assert (result.action, result.status) == ("created", "InService")
    sm = moto.client("sagemaker")

    model = sm.describe_model(ModelName=result.model_name)
    assert model["PrimaryContainer"] == {
        "Image": IMAGE,
        "ModelDataUrl": "s3://conch-models/mme/",
        "Mode": "MultiModel",
        "Environment": {"SAGEMAKER_TRITON_LOG_VERBOSE": "true"},
    }
    assert model["ExecutionRoleArn"] == ROLE

    config = sm.describe_endpoint_config(EndpointConfigName=result.config_name)
    (variant,) = config["ProductionVariants"]
    assert variant == {"VariantName": "AllTraffic", "ModelName": result.model_name, "InstanceType": INSTANCE,
                       "InitialInstanceCount": 1, "InitialVariantWeight": 1.0}

    endpoint = sm.describe_endpoint(EndpointName="text-mme")
    assert endpoint["EndpointConfigName"] == result.config_name and endpoint["EndpointStatus"] == "InService"
    for arn in (model["ModelArn"], config["EndpointConfigArn"]):
        assert {"Key": TAG_KEY, "Value": "text-mme"} in sm.list_tags(ResourceArn=arn)["Tags"]
    assert [c["ModelName"] for c in moto.called("CreateModel")] == [result.model_name]


def test_deploying_the_same_spec_again_changes_nothing(moto: Moto) -> None:
    first = deploy_endpoint(spec(), moto.aws, poll=0.01)
    moto.calls.clear()
    again = deploy_endpoint(spec(), moto.aws, poll=0.01)
    assert again.action == "unchanged" and again.config_name == first.config_name
    assert not moto.called("CreateModel") and not moto.called("CreateEndpointConfig")
    assert not moto.called("UpdateEndpoint") and not moto.called("CreateEndpoint")


def test_an_update_makes_a_new_config_and_moves_the_endpoint_to_it(moto: Moto) -> None:
    first = deploy_endpoint(spec(), moto.aws, poll=0.01)
    bigger = spec(instance_count=2)
    assert bigger.model_name == first.model_name and bigger.config_name != first.config_name
    # moto 5.2 has no UpdateEndpoint (it answers 500): everything up to that call is checked here, the
    # update itself (and SageMaker's rollback on failure) only on AWS.
    with pytest.raises(DeployError, match=f"updating endpoint 'text-mme' to config '{bigger.config_name}'"):
        deploy_endpoint(bigger, moto.aws, poll=0.01)
    assert moto.called("UpdateEndpoint")[-1] == {"EndpointName": "text-mme", "EndpointConfigName": bigger.config_name}
    sm = moto.client("sagemaker")
    (variant,) = sm.describe_endpoint_config(EndpointConfigName=bigger.config_name)["ProductionVariants"]
    assert variant["InitialInstanceCount"] == 2 and variant["ModelName"] == first.model_name

    image = spec(image=triton_image("24.05", REGION))
    assert image.model_name != first.model_name  # a new container is a new model
    with pytest.raises(DeployError, match=f"updating endpoint 'text-mme' to config '{image.config_name}'"):
        deploy_endpoint(image, moto.aws, poll=0.01)
    model = sm.describe_model(ModelName=image.model_name)
    assert model["PrimaryContainer"]["Image"].endswith("/sagemaker-tritonserver:24.05-py3")


def test_delete_removes_the_endpoint_and_every_config_and_model_conch_made(moto: Moto) -> None:
    first = deploy_endpoint(spec(), moto.aws, poll=0.01)
    second = spec(instance_count=2)
    with pytest.raises(DeployError, match=f"updating endpoint 'text-mme' to config '{second.config_name}'"):
        deploy_endpoint(second, moto.aws, poll=0.01)  # leaves a second config behind (moto cannot update)
    sm = moto.client("sagemaker")
    sm.create_model(ModelName="text-mme-someone-elses", ExecutionRoleArn=ROLE,
                    PrimaryContainer={"Image": IMAGE, "ModelDataUrl": "s3://x/", "Mode": "MultiModel"})

    deleted = delete_endpoint("text-mme", moto.aws)
    assert deleted[0] == "endpoint text-mme"
    assert f"endpoint config {first.config_name}" in deleted and f"model {first.model_name}" in deleted
    assert len([d for d in deleted if d.startswith("endpoint config ")]) == 2
    assert sm.list_endpoints()["Endpoints"] == []
    assert sm.list_endpoint_configs()["EndpointConfigs"] == []
    assert [m["ModelName"] for m in sm.list_models()["Models"]] == ["text-mme-someone-elses"]  # not tagged: kept

    with pytest.raises(DeployError, match="nothing to undeploy: no endpoint 'text-mme' in us-east-1"):
        delete_endpoint("text-mme", moto.aws)


def test_a_busy_or_failed_endpoint_is_not_updated(moto: Moto) -> None:
    sm = moto.client("sagemaker")
    first = deploy_endpoint(spec(), moto.aws, poll=0.01)
    endpoint = sm.describe_endpoint(EndpointName="text-mme")
    assert endpoint["EndpointConfigName"] == first.config_name
    from moto.sagemaker.models import sagemaker_backends  # moto runs in this process: set states it never reaches

    stored = sagemaker_backends["123456789012"][REGION].endpoints["text-mme"]
    stored.endpoint_status = "Updating"
    with pytest.raises(DeployError, match="endpoint 'text-mme' is Updating; SageMaker takes one change at a time"):
        deploy_endpoint(spec(instance_count=2), moto.aws, poll=0.01)
    stored.endpoint_status, stored.failure_reason = "Failed", "CannotStartContainerError"
    with pytest.raises(DeployError, match=r"is Failed \(CannotStartContainerError\) and SageMaker cannot update a "
                       r"failed endpoint: `conch undeploy --endpoint text-mme`"):
        deploy_endpoint(spec(instance_count=2), moto.aws, poll=0.01)


class ScriptedSageMaker:
    """describe_endpoint answers in the order SageMaker moves through states moto never shows."""

    def __init__(self, *states: dict[str, Any]) -> None:
        self.states = list(states)

    def describe_endpoint(self, EndpointName: str) -> dict[str, Any]:
        return self.states.pop(0) if len(self.states) > 1 else self.states[0]


def test_waiting_reports_failure_rollback_and_timeout() -> None:
    creating = {"EndpointStatus": "Creating", "EndpointConfigName": "c2"}
    failed = {"EndpointStatus": "Failed", "EndpointConfigName": "c2", "FailureReason": "image not found"}
    with pytest.raises(DeployError, match=r"endpoint 'e' failed: image not found \(container logs: CloudWatch log "
                       r"group /aws/sagemaker/Endpoints/e\)"):
        wait_in_service(ScriptedSageMaker(creating, failed), "e", poll=0)

    updating = {"EndpointStatus": "Updating", "EndpointConfigName": "c1"}
    rolled_back = {"EndpointStatus": "InService", "EndpointConfigName": "c1", "FailureReason": "health check"}
    with pytest.raises(DeployError, match="updating endpoint 'e' to 'c2' failed and SageMaker rolled back to 'c1'"):
        wait_in_service(ScriptedSageMaker(updating, rolled_back), "e", poll=0, expect_config="c2")

    done = {"EndpointStatus": "InService", "EndpointConfigName": "c2"}
    assert wait_in_service(ScriptedSageMaker(updating, updating, done), "e", poll=0, expect_config="c2") == done
    not_yet = {"EndpointStatus": "InService", "EndpointConfigName": "c1", "FailureReason": "an older update"}
    assert wait_in_service(ScriptedSageMaker(not_yet, updating, done), "e", poll=0, expect_config="c2") == done
    with pytest.raises(DeployError, match="still Creating after 0 s; SageMaker carries on"):
        wait_in_service(ScriptedSageMaker(creating), "e", poll=0, timeout=0)


@pytest.mark.parametrize(("changes", "message"), [
    ({"name": "text_mme"}, "endpoint name 'text_mme': SageMaker takes 1-63 letters, digits and hyphens"),
    ({"name": "x" * 64}, "SageMaker takes 1-63"),
    ({"role_arn": "SageMakerRole"}, "role 'SageMakerRole': give the ARN of the IAM role"),
    ({"instance_count": 0}, "an endpoint needs at least one instance"),
    ({"model_data_url": "s3://conch-models/mme/a.tar.gz"}, "an MME needs an S3 prefix ending in '/'"),
    ({"instance_type": "ml.g5.12xlarge"}, "ml.g5.12xlarge has 4 GPUs, but SageMaker GPU multi-model endpoints run "
     "on single-GPU instances only; use ml.g5.xlarge, ml.g5.2xlarge"),
    ({"instance_type": "ml.p3.8xlarge"}, "use ml.p3.2xlarge, and scale out"),
    ({"instance_type": "ml.p4d.24xlarge"}, "has 8 GPUs"),
    ({"instance_type": "g5.xlarge"}, "SageMaker names them ml.<family>.<size>"),
])
def test_specs_sagemaker_or_a_gpu_mme_would_refuse_are_refused(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(DeployError, match=message.replace(".", r"\.").replace("(", r"\(").replace(")", r"\)")):
        spec(**changes)


def test_instance_types_a_gpu_mme_may_not_support_warn() -> None:
    assert spec(instance_type="ml.g5.xlarge").warnings == ()
    assert spec(instance_type="ml.p3.2xlarge").warnings == ()
    assert spec(instance_type="ml.c5.2xlarge").warnings == ()  # CPU MMEs run the same image
    (warning,) = spec(instance_type="ml.g6.xlarge").warnings
    assert "documented for the g4dn, g5, p3 families" in warning


def test_the_image_comes_from_the_regions_registry_or_an_override() -> None:
    assert triton_image("24.10", "eu-west-1") == (
        "802834080501.dkr.ecr.eu-west-1.amazonaws.com/sagemaker-tritonserver:24.10-py3")
    assert triton_image("23.05", "cn-north-1") == (
        "472730292857.dkr.ecr.cn-north-1.amazonaws.com.cn/sagemaker-tritonserver:23.05-py3")
    with pytest.raises(DeployError, match="does not know the SageMaker Triton image registry of region 'mars-1'"):
        triton_image("24.10", "mars-1")
    assert triton_image("24.10", "mars-1", "my.registry/triton:custom") == "my.registry/triton:custom"


@pytest.fixture
def moto_updates(moto: Moto, monkeypatch: pytest.MonkeyPatch) -> Moto:
    """moto 5.2 answers UpdateEndpoint with 500. Its server runs in this process, so give it the operation as
    SageMaker documents it: the config must exist, and the endpoint then runs it (here at once, InService)."""
    from moto.core.responses import ActionResult
    from moto.sagemaker.exceptions import ValidationError
    from moto.sagemaker.responses import SageMakerResponse

    def update_endpoint(self: Any) -> ActionResult:
        backend = self.sagemaker_backend
        endpoint = backend.endpoints[self._get_param("EndpointName")]
        config_name = self._get_param("EndpointConfigName")
        if config_name not in backend.endpoint_configs:
            raise ValidationError(message=f"Could not find endpoint configuration '{config_name}'.")
        config = backend.describe_endpoint_config(config_name)
        endpoint.endpoint_config_name = config_name
        endpoint.production_variants = endpoint._process_production_variants(config["ProductionVariants"])
        return ActionResult({"EndpointArn": endpoint.arn})

    monkeypatch.setattr(SageMakerResponse, "update_endpoint", update_endpoint, raising=False)
    return moto


def test_an_update_deregisters_autoscaling_first_and_removes_what_the_old_endpoint_used(moto_updates: Moto) -> None:
    from conch.sagemaker.autoscaling import Autoscaling, apply_autoscaling, scalable_target

    moto = moto_updates
    first = deploy_endpoint(spec(), moto.aws, poll=0.01)
    apply_autoscaling(moto.aws, "text-mme", "AllTraffic", Autoscaling(max_instances=3))
    moto.calls.clear()

    bigger = spec(instance_type="ml.p3.2xlarge")  # a new instance type: autoscaling must let go of the variant
    updated = deploy_endpoint(bigger, moto.aws, poll=0.01)
    assert updated.action == "updated" and updated.status == "InService"
    operations = [op for _, op, _ in moto.calls]
    assert operations.index("DeregisterScalableTarget") < operations.index("UpdateEndpoint")
    assert any("removed the autoscaling of text-mme/AllTraffic" in n for n in updated.notes)
    assert scalable_target(moto.aws, "text-mme", "AllTraffic") is None
    assert updated.removed == [f"endpoint config {first.config_name}"]  # the model (same image) is still used
    sm = moto.client("sagemaker")
    assert [c["EndpointConfigName"] for c in sm.list_endpoint_configs()["EndpointConfigs"]] == [bigger.config_name]

    image = spec(instance_type="ml.p3.2xlarge", image=triton_image("24.05", REGION))
    moved = deploy_endpoint(image, moto.aws, poll=0.01)
    assert sorted(moved.removed) == sorted([f"endpoint config {bigger.config_name}", f"model {first.model_name}"])
    assert [m["ModelName"] for m in sm.list_models()["Models"]] == [image.model_name]
    assert sm.describe_endpoint(EndpointName="text-mme")["EndpointConfigName"] == image.config_name


def test_no_wait_returns_before_the_endpoint_is_in_service_and_removes_nothing(moto_updates: Moto) -> None:
    moto = moto_updates
    first = deploy_endpoint(spec(), moto.aws, poll=0.01)
    updated = deploy_endpoint(spec(instance_count=2), moto.aws, wait=False)
    assert updated.action == "updated" and updated.status == "Updating" and updated.removed == []
    configs = moto.client("sagemaker").list_endpoint_configs()["EndpointConfigs"]
    assert first.config_name in [c["EndpointConfigName"] for c in configs]  # cleanup waits for the new config


def test_waiting_on_an_endpoint_that_is_gone_or_out_of_service(moto: Moto) -> None:
    with pytest.raises(DeployError, match=r"endpoint 'gone' disappeared while waiting for it \(deleted elsewhere\?\)"):
        wait_in_service(moto.aws.client("sagemaker"), "gone", poll=0)
    out = {"EndpointStatus": "OutOfService", "EndpointConfigName": "c1"}
    with pytest.raises(DeployError, match=r"endpoint 'e' is OutOfService, not coming into service \(container logs"):
        wait_in_service(ScriptedSageMaker(out), "e", poll=0)
