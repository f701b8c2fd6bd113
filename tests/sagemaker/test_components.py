"""`conch deploy --components`: each archive a model and an inference component. moto has no inference
components, so every request is built by conch's functions and checked by real boto3 clients behind botocore's
Stubber (the service model's shapes), and S3 and CreateModel go to moto's server where it can."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ParamValidationError
from conftest import ROLE, Moto
from stubbed import REGION, StubbedAws, send_through_stubber

from conch.cli import main
from conch.errors import DeployError
from conch.sagemaker.component_resources import Resources, measured_mb, read_overrides, read_probes, resources_for
from conch.sagemaker.component_rollout import delete_components_endpoint, deploy_components, upload_for_components
from conch.sagemaker.component_scaling import DIMENSION, METRIC, CopyScaling, apply_component_scaling
from conch.sagemaker.components import Component, ComponentEndpoint, component_name, differs, served_model
from conch.sagemaker.dry_run import DryRunAws
from conch.sagemaker.images import triton_image
from conch.sagemaker.s3 import ModelLocation

IMAGE = triton_image("24.10", REGION)


def arn(kind: str, name: str) -> str:
    return f"arn:aws:sagemaker:{REGION}:123456789012:{kind}/{name}"


def endpoint(*components: Component, **changes: Any) -> ComponentEndpoint:
    fields: dict[str, Any] = {
        "name": "text-ic",
        "role_arn": ROLE,
        "image": IMAGE,
        "components": components,
        "instance_type": "ml.g5.xlarge",
        "min_instances": 0,
        "max_instances": 2,
    }
    return ComponentEndpoint(**{**fields, **changes})


def component(name: str = "linear_a", copies: int = 1, memory_mb: int = 512) -> Component:
    return Component(
        component_name("text-ic", f"{name}.tar.gz"),
        f"{name}.tar.gz",
        f"s3://conch-models/ic/{name}.tar.gz",
        name,
        Resources(memory_mb, 1.0, 1, "given"),
        copies,
    )


def deploy_args(dist: Path, *extra: str) -> list[str]:
    return [
        "deploy",
        str(dist),
        "--components",
        "--bucket",
        "conch-models",
        "--prefix",
        "ic",
        "--role",
        ROLE,
        "--endpoint",
        "text-ic",
        "--region",
        REGION,
        "--instance-type",
        "ml.g5.xlarge",
        *extra,
    ]


def test_dry_run_of_components_plans_one_model_and_component_per_archive_and_every_call_passes_a_real_client(
    archives: list[Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    planned: list[DryRunAws] = []
    original = DryRunAws.report
    monkeypatch.setattr(DryRunAws, "report", lambda self: planned.append(self) or original(self))
    code = main(
        deploy_args(
            archives[0].parent,
            "--dry-run",
            "--min-instances",
            "0",
            "--max-instances",
            "2",
            "--max-copies",
            "3",
            "--invocations-per-copy",
            "120",
        )
    )
    out = capsys.readouterr().out
    assert code == 0
    writes = [(c.service, c.operation) for c in planned[0].calls if not c.read]
    assert (
        writes
        == [("s3", "PutObject")] * 2
        + [("sagemaker", "CreateModel")] * 2
        + [
            ("sagemaker", "CreateEndpointConfig"),
            ("sagemaker", "CreateEndpoint"),
            ("sagemaker", "CreateInferenceComponent"),
            ("sagemaker", "CreateInferenceComponent"),
        ]
        + [
            ("application-autoscaling", "RegisterScalableTarget"),
            ("application-autoscaling", "PutScalingPolicy"),
            ("application-autoscaling", "PutScalingPolicy"),
            ("cloudwatch", "PutMetricAlarm"),
        ]
        * 2
    )
    models = [c.params for c in planned[0].calls if c.operation == "CreateModel"]
    assert models[0]["PrimaryContainer"]["Environment"]["SAGEMAKER_TRITON_DEFAULT_MODEL_NAME"] == "linear_a"
    assert models[0]["PrimaryContainer"]["ModelDataUrl"] == "s3://conch-models/ic/linear_a.tar.gz"
    assert models[0]["PrimaryContainer"]["Mode"] == "SingleModel"
    config = next(c.params for c in planned[0].calls if c.operation == "CreateEndpointConfig")
    assert config["ExecutionRoleArn"] == ROLE and "ModelName" not in config["ProductionVariants"][0]
    assert config["ProductionVariants"][0]["ManagedInstanceScaling"] == {
        "Status": "ENABLED",
        "MinInstanceCount": 0,
        "MaxInstanceCount": 2,
    }
    assert "component text-ic-linear-a: linear_a.tar.gz serving linear_a, 1 copies of 1024 MiB" in out
    for call in planned[0].calls:
        if call.service != "s3":  # the S3 calls' Body is a description here; moto's server takes the real ones
            send_through_stubber(call.service, call.operation, call.params)


def test_a_wrongly_shaped_request_is_caught_by_botocore_and_by_the_dry_run() -> None:
    request = endpoint(component()).component_request(component())
    del request["Specification"]["ComputeResourceRequirements"]["MinMemoryRequiredInMb"]
    request["RuntimeConfig"]["CopyCount"] = "two"
    with pytest.raises(ParamValidationError, match="MinMemoryRequiredInMb") as caught:
        send_through_stubber("sagemaker", "CreateInferenceComponent", request)
    assert "CopyCount" in str(caught.value)
    with pytest.raises(
        DeployError, match="dry run: AWS would refuse sagemaker CreateInferenceComponent: .*MinMemoryRequiredInMb"
    ):
        DryRunAws(REGION).client("sagemaker").create_inference_component(**request)


def test_scale_to_zero_registers_the_copy_count_tracks_invocations_per_copy_and_scales_out_on_refusals() -> None:
    aws = StubbedAws(REGION)
    target = {
        "ServiceNamespace": "sagemaker",
        "ResourceId": "inference-component/text-ic-linear-a",
        "ScalableDimension": DIMENSION,
    }
    aws.answer(
        "application-autoscaling", "register_scalable_target", {}, {**target, "MinCapacity": 0, "MaxCapacity": 4}
    )
    aws.answer("application-autoscaling", "put_scaling_policy", {"PolicyARN": "arn:tracking"})
    aws.answer("application-autoscaling", "put_scaling_policy", {"PolicyARN": "arn:step"})
    aws.answer("cloudwatch", "put_metric_alarm", {})
    arns = apply_component_scaling(aws, "text-ic-linear-a", CopyScaling(4, 100.0))
    aws.all_answered()
    assert arns == ["arn:tracking", "arn:step"]
    requests = CopyScaling(4, 100.0).requests("text-ic-linear-a")
    tracking = requests[1][2]["TargetTrackingScalingPolicyConfiguration"]
    assert tracking["PredefinedMetricSpecification"]["PredefinedMetricType"] == METRIC
    alarm = requests[3][2]
    assert (alarm["MetricName"], alarm["Namespace"], alarm["Dimensions"]) == (
        "NoCapacityInvocationFailures",
        "AWS/SageMaker",
        [{"Name": "InferenceComponentName", "Value": "text-ic-linear-a"}],
    )
    assert [m for _, m, _ in CopyScaling(4, 100.0, min_copies=1).requests("x")] == [
        "register_scalable_target",
        "put_scaling_policy",
    ]  # no step policy when a copy always runs


def test_an_existing_component_on_another_model_is_updated_and_the_old_model_removed() -> None:
    new = component()
    spec = endpoint(new)
    aws = StubbedAws(REGION)
    sm = "sagemaker"
    aws.answer(
        sm,
        "describe_model",
        {"ModelName": spec.model_name(new), "ModelArn": arn("model", "m"), "CreationTime": "2026-01-01"},
        {"ModelName": spec.model_name(new)},
    )
    aws.answer(
        sm,
        "describe_endpoint_config",
        {
            "EndpointConfigName": spec.config_name,
            "EndpointConfigArn": arn("endpoint-config", "c"),
            "ProductionVariants": spec.production_variants(),
            "CreationTime": "2026-01-01",
        },
    )
    aws.answer(
        sm,
        "describe_endpoint",
        {
            "EndpointName": "text-ic",
            "EndpointArn": arn("endpoint", "text-ic"),
            "EndpointConfigName": spec.config_name,
            "EndpointStatus": "InService",
            "CreationTime": "2026-01-01",
            "LastModifiedTime": "2026-01-01",
        },
    )
    old = {
        "InferenceComponentName": new.name,
        "InferenceComponentArn": arn("inference-component", "ic"),
        "EndpointName": "text-ic",
        "EndpointArn": arn("endpoint", "text-ic"),
        "CreationTime": "2026-01-01",
        "LastModifiedTime": "2026-01-01",
        "InferenceComponentStatus": "InService",
        "Specification": {
            "ModelName": "text-ic-linear-a-000000000000",
            "ComputeResourceRequirements": new.resources.requirements(),
        },
    }
    aws.answer(sm, "describe_inference_component", old)
    aws.answer(
        sm,
        "update_inference_component",
        {"InferenceComponentArn": arn("inference-component", "ic")},
        spec.update_request(new),
    )
    aws.answer(sm, "describe_inference_component", {**old, "Specification": spec.specification(new)})
    aws.answer(
        sm,
        "list_inference_components",
        {
            "InferenceComponents": [
                {
                    "InferenceComponentName": new.name,
                    "InferenceComponentArn": arn("inference-component", "ic"),
                    "EndpointName": "text-ic",
                    "EndpointArn": arn("endpoint", "text-ic"),
                    "VariantName": "AllTraffic",
                    "CreationTime": "2026-01-01",
                    "LastModifiedTime": "2026-01-01",
                }
            ]
        },
    )
    aws.answer(sm, "list_endpoint_configs", {"EndpointConfigs": []})
    aws.answer(
        sm,
        "list_models",
        {
            "Models": [
                {
                    "ModelName": "text-ic-linear-a-000000000000",
                    "ModelArn": arn("model", "old"),
                    "CreationTime": "2026-01-01",
                },
                {"ModelName": spec.model_name(new), "ModelArn": arn("model", "m"), "CreationTime": "2026-01-01"},
            ]
        },
    )
    aws.answer(
        sm, "list_tags", {"Tags": [{"Key": "conch:endpoint", "Value": "text-ic"}]}, {"ResourceArn": arn("model", "old")}
    )
    aws.answer(sm, "delete_model", {}, {"ModelName": "text-ic-linear-a-000000000000"})
    done = deploy_components(spec, aws, poll=0)
    aws.all_answered()
    assert (done.endpoint_action, done.components, done.removed) == (
        "unchanged",
        {new.name: "updated"},
        ["model text-ic-linear-a-000000000000"],
    )


def test_undeploy_deletes_the_components_and_their_scaling_before_the_endpoint() -> None:
    aws = StubbedAws(REGION)
    sm, name = "sagemaker", "text-ic-linear-a"
    aws.answer(
        sm,
        "list_inference_components",
        {
            "InferenceComponents": [
                {
                    "InferenceComponentName": name,
                    "InferenceComponentArn": arn("inference-component", "ic"),
                    "EndpointName": "text-ic",
                    "EndpointArn": arn("endpoint", "text-ic"),
                    "VariantName": "AllTraffic",
                    "CreationTime": "2026-01-01",
                    "LastModifiedTime": "2026-01-01",
                }
            ]
        },
        {"EndpointNameEquals": "text-ic", "MaxResults": 100},
    )
    aws.answer("cloudwatch", "describe_alarms", {"MetricAlarms": [{"AlarmName": f"conch-{name}-no-capacity"}]})
    aws.answer("cloudwatch", "delete_alarms", {}, {"AlarmNames": [f"conch-{name}-no-capacity"]})
    aws.answer("application-autoscaling", "describe_scalable_targets", {"ScalableTargets": []})
    aws.answer(sm, "delete_inference_component", {}, {"InferenceComponentName": name})
    aws.missing(sm, "describe_inference_component")
    aws.answer(
        sm,
        "describe_endpoint",
        {
            "EndpointName": "text-ic",
            "EndpointArn": arn("endpoint", "text-ic"),
            "EndpointStatus": "InService",
            "CreationTime": "2026-01-01",
            "LastModifiedTime": "2026-01-01",
        },
    )
    aws.answer(sm, "delete_endpoint", {}, {"EndpointName": "text-ic"})
    aws.answer(sm, "list_endpoint_configs", {"EndpointConfigs": []})
    aws.answer(sm, "list_models", {"Models": []})
    deleted = delete_components_endpoint("text-ic", aws, poll=0)
    aws.all_answered()
    assert deleted == [f"alarm conch-{name}-no-capacity", f"inference component {name}", "endpoint text-ic"]


def test_undeploy_of_nothing_says_so() -> None:
    with pytest.raises(DeployError, match="nothing to undeploy: no endpoint 'text-ic' with inference components"):
        delete_components_endpoint("text-ic", DryRunAws(REGION))


def test_the_archives_and_their_models_reach_moto(moto: Moto, bucket: str, archives: list[Path]) -> None:
    location = ModelLocation(bucket, "ic")
    uploads = upload_for_components(archives, location, moto.aws)
    assert [u.url for u in uploads] == [f"s3://{bucket}/ic/linear_a.tar.gz", f"s3://{bucket}/ic/linear_b.tar.gz"]
    spec = endpoint(component("linear_a"))
    moto.client("sagemaker").create_model(**spec.model_request(spec.components[0]))
    described = moto.client("sagemaker").describe_model(ModelName=spec.model_name(spec.components[0]))
    assert described["PrimaryContainer"]["ModelDataUrl"] == uploads[0].url


def test_differs_compares_model_and_reservation() -> None:
    spec = endpoint(component())
    wanted = spec.specification(component())
    assert not differs({"Specification": dict(wanted)}, wanted)
    assert differs({"Specification": {**wanted, "ModelName": "other"}}, wanted)
    assert "RuntimeConfig" not in spec.update_request(component(), copies=False)


def test_resources_precedence_and_measurement(tmp_path: Path) -> None:
    probe = {
        "ensemble": "linear_a",
        "archive": "linear_a.tar.gz",
        "memory_per_copy_bytes": 200 * 2**20,
        "base_memory_bytes": 56 * 2**20,
    }
    (tmp_path / "p.json").write_text(json.dumps(probe))
    probes = read_probes([tmp_path / "p.json"])
    assert measured_mb(probe) == 320  # (56 + 200) MiB x 1.25
    assert resources_for("linear_a.tar.gz", "linear_a", accelerators=1, probes=probes).memory_mb == 320
    assert resources_for("x.tar.gz", "x", accelerators=0).source == "assumed (not measured)"
    assert resources_for("linear_a.tar.gz", "linear_a", accelerators=1, probes=probes, memory_mb=700).memory_mb == 700
    own = resources_for(
        "linear_a.tar.gz",
        "linear_a",
        accelerators=1,
        probes=probes,
        memory_mb=700,
        overrides={"linear_a": {"memory_mb": 900, "cpus": 2, "accelerators": 0}},
    )
    assert own == Resources(900, 2.0, 0, "given per ensemble")
    assert own.requirements() == {"NumberOfCpuCoresRequired": 2.0, "MinMemoryRequiredInMb": 900}


def test_user_mistakes_are_refused_with_the_fix(
    tmp_path: Path, archives: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(DeployError, match="component memory 64 MiB: SageMaker takes at least 128 MiB"):
        Resources(64)
    with pytest.raises(DeployError, match="component CPUs 0 and accelerators 0: give a positive"):
        Resources(256, 0.0)
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(DeployError, match="bad.json: not a probe JSON written by `conch bench --probe`"):
        read_probes([tmp_path / "bad.json"])
    (tmp_path / "r.json").write_text('{"linear_a": {"memory": 5}}')
    with pytest.raises(DeployError, match="'linear_a' has memory; the fields are accelerators, cpus, memory_mb"):
        read_overrides(tmp_path / "r.json")
    (tmp_path / "r.json").write_text("[1]")
    with pytest.raises(DeployError, match="--resources .*r.json: expected an object of objects"):
        read_overrides(tmp_path / "r.json")
    with pytest.raises(DeployError, match="copies 2..1: give 0 <= --min-copies <= --max-copies"):
        CopyScaling(1, 10.0, 2)
    with pytest.raises(DeployError, match="target value 0: give the invocations per copy per minute"):
        CopyScaling(1, 0.0)
    with pytest.raises(DeployError, match="component text-ic-linear-a: -1 copies; give 0"):
        component(copies=-1)
    with pytest.raises(DeployError, match="model data 's3://b/x/' is not the S3 URL of an archive"):
        Component("text-ic-x", "x.tar.gz", "s3://b/x/", "x", Resources(256))
    with pytest.raises(DeployError, match="inference component name 'a_b': SageMaker takes 1-63"):
        Component("a_b", "x.tar.gz", "s3://b/x.tar.gz", "x", Resources(256))
    with pytest.raises(DeployError, match="endpoint name 'a_b': SageMaker takes 1-63"):
        endpoint(name="a_b")
    with pytest.raises(DeployError, match="role 'r': give the ARN of the IAM role"):
        endpoint(role_arn="r")
    with pytest.raises(DeployError, match="instances: min 3, initial 1, max 2; an endpoint starts"):
        endpoint(min_instances=3)
    with pytest.raises(DeployError, match="two archives make the component 'text-ic-linear-a'"):
        endpoint(component(), component())
    with pytest.raises(DeployError, match="x.tar.gz: its config.pbtxt is at the root"):
        served_model("x.tar.gz", (), "model")
    with pytest.raises(DeployError, match="x.tar.gz: 2 ensembles \\(a, b\\); an inference component serves one"):
        served_model("x.tar.gz", ("a", "b"), None)
    for extra, message in (
        (
            ["--instance-type", "ml.c5.large", "--component-memory", "20GiB"],
            "one copy reserves 20480 MiB (given) but ml.c5.large has 4096 MiB",
        ),
        (["--copies", "2"], "--as and --copies stamp copies for an MME; with --components"),
        (["--min-copies", "0"], "copy autoscaling needs --max-copies"),
        (["--max-copies", "2"], "copy autoscaling needs --invocations-per-copy"),
    ):
        assert main(deploy_args(archives[0].parent, "--dry-run", *extra)) == 2
        assert message in capsys.readouterr().err
    with pytest.raises(DeployError, match="autoscaling needs the components InService: drop --no-wait"):
        deploy_components(endpoint(component()), DryRunAws(REGION), scaling=CopyScaling(2, 5.0), wait=False)


def test_waiting_for_a_component_names_its_failure_and_its_timeout() -> None:
    from conch.sagemaker.component_rollout import wait_component

    aws = StubbedAws(REGION)
    described = {"InferenceComponentName": "text-ic-a", "InferenceComponentArn": arn("inference-component", "a"),
                 "EndpointName": "text-ic", "EndpointArn": arn("endpoint", "text-ic"), "CreationTime": "2026-01-01",
                 "LastModifiedTime": "2026-01-01"}
    aws.answer("sagemaker", "describe_inference_component", {**described, "InferenceComponentStatus": "Failed",
                                                             "FailureReason": "the copy does not fit"})
    sm = aws.client("sagemaker")
    with pytest.raises(DeployError, match="inference component 'text-ic-a' failed: the copy does not fit \\(container "
                                          "logs: CloudWatch log group /aws/sagemaker/Endpoints/text-ic\\)"):
        wait_component(sm, "text-ic-a", poll=0)
    aws.answer("sagemaker", "describe_inference_component", {**described, "InferenceComponentStatus": "Creating"})
    with pytest.raises(DeployError, match="inference component 'text-ic-a' is still Creating after 0 s; SageMaker "
                                          "carries on"):
        wait_component(sm, "text-ic-a", timeout=0, poll=0)
    aws.missing("sagemaker", "describe_inference_component")
    with pytest.raises(DeployError, match="inference component 'text-ic-a' disappeared while waiting for it"):
        wait_component(sm, "text-ic-a", poll=0)
