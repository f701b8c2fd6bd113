"""config.pbtxt rendering: every supported field lands in Triton's ModelConfig as declared."""

from __future__ import annotations

import re

import basic_steps
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from conch import (
    BuildError,
    DynamicBatching,
    InstanceGroup,
    PythonStep,
    Release,
    Target,
    Tensor,
    VersionPolicy,
    Warmup,
)
from conch.compiler.pbtxt import check_config, render_config

ENSEMBLE_REGEX = re.compile(r'platform:(\s)*"ensemble"')  # what SageMaker's front end looks for


def parse(text: str) -> model_config_pb2.ModelConfig:
    config = model_config_pb2.ModelConfig()
    text_format.Parse(text, config)
    return config


def full_step() -> PythonStep:
    return PythonStep(
        "full",
        basic_steps.double,
        inputs=[Tensor("x", "FP32", [4], reshape=[2, 2]), Tensor("mask", "INT64", [3], optional=True)],
        outputs=[Tensor("y", "FP32", [4], labels=["a", "b", "c", "d"])],
        max_batch_size=16,
        instance_group=[InstanceGroup("KIND_GPU", count=2, gpus=(0,)), InstanceGroup("KIND_CPU")],
        dynamic_batching=DynamicBatching(preferred_batch_size=(4, 8), max_queue_delay_microseconds=100,
                                         preserve_ordering=True),
        parameters={"quote": 'say "hi"', "backslash": "a\\b", "unicode": "café", "num_threads": 4},
        warmup=Warmup("zeros", batch_size=2, count=3),
        version_policy=VersionPolicy(latest=2),
    )


def test_every_step_field_renders_and_parses() -> None:
    layout = full_step().layout("ens__full", Target.PRODUCTION, Release.of("24.10"), "ens")
    config = parse(render_config(layout.spec))
    assert config.name == "ens__full" and config.backend == "python" and config.max_batch_size == 16
    x, mask = config.input
    assert (x.name, x.data_type, list(x.dims)) == ("x", model_config_pb2.TYPE_FP32, [4])
    assert list(x.reshape.shape) == [2, 2]
    assert mask.optional and list(mask.dims) == [3] and mask.data_type == model_config_pb2.TYPE_INT64
    assert config.output[0].label_filename == "y_labels.txt"
    gpu, cpu = config.instance_group
    assert (gpu.kind, gpu.count, list(gpu.gpus)) == (model_config_pb2.ModelInstanceGroup.KIND_GPU, 2, [0])
    assert cpu.kind == model_config_pb2.ModelInstanceGroup.KIND_CPU
    db = config.dynamic_batching
    assert list(db.preferred_batch_size) == [4, 8] and db.max_queue_delay_microseconds == 100 and db.preserve_ordering
    params = {k: v.string_value for k, v in config.parameters.items()}
    assert params == {"quote": 'say "hi"', "backslash": "a\\b", "unicode": "café", "num_threads": "4"}
    (warm,) = config.model_warmup
    assert (warm.name, warm.batch_size, warm.count) == ("zeros", 2, 3)
    assert set(warm.inputs) == {"x", "mask"} and warm.inputs["x"].zero_data
    assert config.version_policy.latest.num_versions == 2
    assert layout.files["y_labels.txt"] == b"a\nb\nc\nd\n"


def test_warmup_refuses_wildcard_dims_with_the_reason() -> None:
    step = PythonStep("s", basic_steps.double, inputs=[Tensor("mask", "INT64", [-1])],
                      outputs=[Tensor("y", "FP32", [4])],
                      max_batch_size=4, warmup=Warmup("zeros"))
    with pytest.raises(BuildError, match=r"warmup 'zeros' needs concrete dims, but input 'mask' has dims \[-1\]"):
        render_config(step.layout("m", Target.PRODUCTION, Release.of("24.10"), "e").spec)


@pytest.mark.parametrize(
    ("policy", "field"),
    [
        (VersionPolicy(all=True), "all"),
        (VersionPolicy(specific=(1,)), "specific"),  # conch lays out version 1 only
        (VersionPolicy(latest=1), "latest"),
    ],
)
def test_version_policies(policy: VersionPolicy, field: str) -> None:
    step = PythonStep("s", basic_steps.double, inputs=[Tensor("x", "FP32", [4])], outputs=[Tensor("y", "FP32", [4])],
                      version_policy=policy)
    config = parse(render_config(step.layout("s", Target.PRODUCTION, Release.of("24.10"), "e").spec))
    assert config.version_policy.WhichOneof("policy_choice") == field


def test_ensemble_config_is_detected_by_sagemaker_and_maps_tensors(linear) -> None:  # type: ignore[no-untyped-def]
    text = render_config(linear.spec())
    assert ENSEMBLE_REGEX.search(text)
    config = parse(text)
    assert config.platform == "ensemble" and config.max_batch_size == 8
    assert not config.instance_group and not config.HasField("dynamic_batching") and not config.model_warmup
    first, second = config.ensemble_scheduling.step
    assert first.model_name == "linear__double" and dict(first.input_map) == {"x": "X"}
    assert dict(first.output_map) == {"y": "double.y"} and dict(second.input_map) == {"y": "double.y"}
    assert dict(second.output_map) == {"z": "Z"}


def test_check_config_rejects_text_that_does_not_parse() -> None:
    with pytest.raises(BuildError, match="does not parse as Triton's ModelConfig"):
        check_config('name: "m"\nmax_batch_size: "eight"\n', "m")


def test_check_config_rejects_name_folder_mismatch() -> None:
    with pytest.raises(BuildError, match="names model 'a', but its folder is 'b'"):
        check_config('name: "a"\n', "b")
