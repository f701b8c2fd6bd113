"""The typed config reader and the ModelConfig fields conch does not model: every such field given on a
step goes declaration -> render -> reader -> `conch inspect` unchanged; wrong ones fail at declaration."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import basic_steps
import pytest
from google.protobuf import text_format
from seed_archives import bert_repo, inception_repo
from tritonclient.grpc import model_config_pb2

from conch import (
    BuildError,
    DeclarationError,
    DynamicBatching,
    Ensemble,
    InstanceGroup,
    PythonStep,
    Tensor,
    VersionPolicy,
    Warmup,
)
from conch.archive.inspection import summarize_config
from conch.compiler.config_reader import read_config
from conch.compiler.pbtxt import parse_config, render_config
from conch.ensembles.config_fields import TYPED_ONLY, TYPED_OR_CARRIED

# One value for every ModelConfig field conch has no typed setting for (and the carried forms of the
# typed ones): proto text, as a user would paste it from a hand-written config.
UNMODELLED = {
    "runtime": 'runtime: "model.so"',
    "batch_input": 'batch_input { kind: BATCH_ELEMENT_COUNT target_name: "count" data_type: TYPE_INT32 '
                   'source_input: "x" }',
    "batch_output": 'batch_output { target_name: "y" kind: BATCH_SCATTER_WITH_INPUT_SHAPE source_input: "x" }',
    "optimization": 'optimization { execution_accelerators { gpu_execution_accelerator { name: "tensorrt" '
                    'parameters { key: "precision_mode" value: "FP16" } } } input_pinned_memory { enable: false } }',
    "sequence_batching": "sequence_batching { max_sequence_idle_microseconds: 5000000 oldest { "
                         "max_candidate_sequences: 4 } }",
    "default_model_filename": 'default_model_filename: "model.py"',
    "cc_model_filenames": 'cc_model_filenames { key: "7.5" value: "model_t4.plan" }',
    "metric_tags": 'metric_tags { key: "team" value: "search" }',
    "model_operations": 'model_operations { op_library_filename: "libcustom.so" }',
    "model_transaction_policy": "model_transaction_policy { decoupled: false }",
    "model_repository_agents": 'model_repository_agents { agents { name: "checksum" parameters { key: '
                               '"MD5:1/model.py" value: "abc" } } }',
    "response_cache": "response_cache { enable: true }",
    "model_metrics": 'model_metrics { metric_control { metric_identifier { family: "nv_inference_request_duration'
                     '_us" } histogram_options { buckets: [ 100, 1000 ] } } }',
    # typed settings carried whole when they hold what the typed form cannot say
    "instance_group": 'instance_group { kind: KIND_CPU count: 2 rate_limiter { resources { name: "R1" count: 4 } '
                      'priority: 2 } }',
    "dynamic_batching": "dynamic_batching { priority_levels: 2 default_priority_level: 1 default_queue_policy { "
                        "timeout_action: DELAY default_timeout_microseconds: 1000 } }",
    "model_warmup": 'model_warmup { name: "files" batch_size: 1 inputs { key: "x" value { data_type: TYPE_FP32 '
                    'dims: [ 4 ] input_data_file: "x.bin" } } }',
    "version_policy": "version_policy { specific { versions: [ 3 ] } }",
}


def _step(config_fields: Any, **settings: Any) -> PythonStep:
    return PythonStep("double", basic_steps.double, inputs=[Tensor("x", "FP32", [4])],
                      outputs=[Tensor("y", "FP32", [4])],
                      max_batch_size=4, config_fields=config_fields, **settings)


def test_the_cases_cover_every_modelconfig_field_conch_does_not_write_from_its_declaration() -> None:
    fields = set(model_config_pb2.ModelConfig.DESCRIPTOR.fields_by_name)
    assert set(UNMODELLED) == fields - set(TYPED_ONLY)
    assert set(TYPED_OR_CARRIED) <= set(UNMODELLED)


@pytest.mark.parametrize("name", sorted(UNMODELLED))
def test_a_field_goes_from_declaration_through_render_and_reader_to_inspect(name: str) -> None:
    given = UNMODELLED[name]
    step = _step(given)
    text = render_config(step.spec("m"))
    expected = parse_config(given, "given")
    assert getattr(parse_config(text, "rendered"), name) == getattr(expected, name)
    read = read_config(text, where="m/config.pbtxt")
    assert read.unexpressed == ()
    assert read.spec.settings.config_fields.names == (name,)
    assert parse_config(render_config(read.spec), "again") == parse_config(text, "rendered")
    (shown,) = summarize_config("m", text.encode()).config_fields.values()
    assert parse_config(shown, "shown") == expected
    assert any(line.strip() == shown for line in summarize_config("m", text.encode()).lines())


def test_fields_are_given_as_proto_messages_dicts_or_text_alike() -> None:
    cache = model_config_pb2.ModelResponseCache(enable=True)
    as_message = _step({"response_cache": cache, "metric_tags": {"team": "search"}})
    as_dict = _step({"response_cache": {"enable": True}, "metric_tags": {"team": "search"}})
    as_text = _step('response_cache { enable: true } metric_tags { key: "team" value: "search" }')
    whole = model_config_pb2.ModelConfig(response_cache=cache, metric_tags={"team": "search"})
    assert as_message.settings == as_dict.settings == as_text.settings == _step(whole).settings


@pytest.mark.parametrize(("given", "said"), [
    ({"respons_cache": {"enable": True}},
     "step 'double': config_fields field 'respons_cache' is not a field of Triton's ModelConfig (nearest: "
     "response_cache)"),
    ({"response_cache": {"enabel": True}}, "response_cache.enabel is not a field of ModelResponseCache (nearest: "
     "enable)"),
    ("sequence_batching { max_sequence_idle_microsecond: 5 }",
     'has no field named "max_sequence_idle_microsecond". (nearest: max_sequence_idle_microseconds)'),
    ({"input": []}, "config_fields gives 'input', which conch writes from the declaration; set it with inputs="),
    ("parameters { key: 'a' value { string_value: 'b' } }", "set it with parameters= instead"),
    (3, "config_fields takes proto text, a ModelConfig message or {field: value}, got int"),
])
def test_a_wrong_field_fails_at_declaration_naming_it(given: Any, said: str) -> None:
    with pytest.raises(DeclarationError, match=_escaped(said)):
        _step(given)


@pytest.mark.parametrize(("typed", "field"), [
    ({"instance_group": InstanceGroup("KIND_CPU")}, "instance_group"),
    ({"dynamic_batching": DynamicBatching()}, "dynamic_batching"),
    ({"warmup": Warmup("w")}, "model_warmup"),
])
def test_a_typed_setting_given_again_in_config_fields_is_refused(typed: dict[str, Any], field: str) -> None:
    with pytest.raises(DeclarationError, match=f"{field} is given twice, as .*= and in config_fields; give it once"):
        _step(UNMODELLED[field], **typed)


def test_dynamic_and_sequence_batching_together_are_refused() -> None:
    with pytest.raises(DeclarationError, match="Triton takes one scheduler per model"):
        _step(UNMODELLED["sequence_batching"], dynamic_batching=True)


@pytest.mark.parametrize("field", ["model_warmup", "instance_group", "sequence_batching", "dynamic_batching",
                                   "optimization"])
def test_fields_triton_refuses_on_an_ensemble_are_refused_there(field: str) -> None:
    with pytest.raises(DeclarationError, match=f"ensemble 'e': config_fields gives '{field}', which Triton refuses "
                                               "on an ensemble; set it on the steps instead"):
        Ensemble("e", config_fields=UNMODELLED[field])


def test_a_decoupled_step_is_refused_in_an_ensemble_with_response_cache_and_on_any_mme() -> None:
    decoupled = "model_transaction_policy { decoupled: true }"
    cached = Ensemble("cached", max_batch_size=4, config_fields="response_cache { enable: true }")
    with pytest.raises(DeclarationError, match="Triton refuses response_cache on an ensemble holding a decoupled"):
        _step(decoupled)(cached.input("X", "FP32", [4]))
    plain = Ensemble("plain", max_batch_size=4)
    with pytest.raises(DeclarationError, match="SageMaker multi-model endpoint, whose front end refuses decoupled"):
        _step(decoupled)(plain.input("X", "FP32", [4]))


def test_the_ensemble_renders_its_own_fields() -> None:
    ens = Ensemble("cached", max_batch_size=4, config_fields={"response_cache": {"enable": True}})
    ens.output("Y", _step(None)(ens.input("X", "FP32", [4])))
    config = parse_config(render_config(ens.spec()), "ensemble")
    assert config.response_cache.enable and config.platform == "ensemble"


def test_gpu_groups_carried_whole_run_on_the_cpu_locally() -> None:
    from conch.ensembles.step import cpu_instances

    step = _step('instance_group { kind: KIND_GPU gpus: [ 0 ] rate_limiter { priority: 1 } }')
    spec, notes = cpu_instances(step.spec("m"))
    (group,) = spec.settings.config_fields.message().instance_group
    assert group.kind == group.KIND_CPU and not group.gpus and group.rate_limiter.priority == 1
    assert notes == ["m: KIND_GPU instance groups run as KIND_CPU on the local target"]


@pytest.mark.parametrize("repo", [bert_repo(), inception_repo()], ids=["bert", "inception"])
def test_seed_002_configs_read_back_to_the_same_modelconfig(repo: dict[str, bytes | None], tmp_path: Path) -> None:
    for path, data in repo.items():
        target = tmp_path / path
        if data is None:
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
    configs = sorted(tmp_path.glob("*/config.pbtxt"))
    assert len(configs) == sum(path.endswith("/config.pbtxt") for path in repo) >= 3
    for config in configs:
        text = config.read_text()
        read = read_config(text, config.parent, f"{config.parent.name}/config.pbtxt")
        assert read.unexpressed == ()
        assert parse_config(render_config(read.spec), "rendered") == parse_config(text, "original")


def test_what_conch_cannot_declare_is_listed_never_dropped() -> None:
    text = ('name: "m" platform: "onnxruntime_onnx" backend: "onnxruntime" max_batch_size: 0 '
            'input { name: "x" data_type: TYPE_FP32 format: FORMAT_NHWC dims: [ 2, 2, 3 ] } '
            'output { name: "y" data_type: TYPE_FP32 dims: [ 1 ] }')
    read = read_config(text, where="m/config.pbtxt")
    assert read.unexpressed == (
        "backend: 'onnxruntime' beside platform 'onnxruntime_onnx'; conch writes the platform alone",
        "input 'x': field 'format' has no conch setting",
    )


def test_a_backend_conch_has_no_step_for_is_named() -> None:
    from conch.errors import BuildError

    with pytest.raises(BuildError, match="m/config.pbtxt: backend 'openvino' has no conch step"):
        read_config('name: "m" backend: "openvino"', where="m/config.pbtxt", strict=True)


def _escaped(text: str) -> str:
    import re

    return re.escape(text)


def test_the_reader_takes_a_parsed_modelconfig_too() -> None:
    config = text_format.Parse('name: "m" backend: "python" max_batch_size: 2 input { name: "x" data_type: '
                               'TYPE_STRING dims: [ 1 ] } output { name: "y" data_type: TYPE_INT64 dims: [ -1 ] }',
                               model_config_pb2.ModelConfig())
    spec = read_config(config).spec
    assert [(t.name, t.dtype.wire, t.dims) for t in (*spec.inputs, *spec.outputs)] == [
        ("x", "BYTES", (1,)), ("y", "INT64", (-1,))]


def test_a_proto_message_of_another_type_is_refused_with_how_to_give_it() -> None:
    with pytest.raises(DeclarationError, match=r"got a ModelResponseCache message \(give it as \{'<field>': "):
        _step(model_config_pb2.ModelResponseCache(enable=True))


def test_a_field_value_of_the_wrong_type_is_named() -> None:
    with pytest.raises(DeclarationError, match="config_fields field 'response_cache': .*enable"):
        _step({"response_cache": {"enable": "maybe"}})


@pytest.mark.parametrize(("text", "said"), [
    ('name: "m" platform: "tensorflow_savedmodel"', "m/config.pbtxt: platform 'tensorflow_savedmodel' has no conch "
                                                    "step (conch has ensemble, onnxruntime_onnx"),
    ('name: "m" backend: "python" output { name: "y" data_type: TYPE_FP32 }',
     "m/config.pbtxt: output 'y': tensor 'y': dims [] is empty, which Triton refuses"),
    ("name: m backend", "m/config.pbtxt: does not parse as Triton's ModelConfig"),
])
def test_a_config_conch_cannot_read_is_named_with_its_file(text: str, said: str) -> None:
    from conch.errors import BuildError

    with pytest.raises(BuildError, match=_escaped(said)):
        read_config(text, where="m/config.pbtxt", strict=True)


def test_the_reader_refuses_nothing_triton_accepts_and_carries_what_it_does_not_model(tmp_path: Path) -> None:
    """`conch check` reads through the reader: a backend conch has no step for, a tensor name or data type
    conch would not declare, labels whose count differs and a version conch never lays out are read, not
    refused; what is not modelled is carried as Triton's message; ``spec`` (and ``strict``) still refuse."""
    (tmp_path / "labels.txt").write_text("a\nb\n")
    text = ('name: "m" backend: "openvino" max_batch_size: 4 '
            'input { name: "x y" data_type: TYPE_FP32 dims: [ 3 ] } '
            'input { name: "h" data_type: TYPE_BF16 dims: [ -1 ] optional: true } '
            'output { name: "z" data_type: TYPE_STRING dims: [ 3 ] label_filename: "labels.txt" } '
            'version_policy { specific { versions: [ 2 ] } } model_transaction_policy { decoupled: true } '
            'default_model_filename: "model.xml" parameters { key: "k" value { string_value: "v" } }')
    read = read_config(text, tmp_path, "m/config.pbtxt")
    assert (read.name, read.served, read.max_batch_size, read.is_ensemble) == ("m", "openvino", 4, False)
    assert [(t.name, t.dtype.wire, t.dims) for t in (*read.inputs, *read.outputs)] == [
        ("x y", "FP32", (3,)), ("z", "BYTES", (3,))]
    assert [tuple(t) for t in read.io("input")] == [("x y", "TYPE_FP32", (3,), False),
                                                    ("h", "TYPE_BF16", (-1,), True)]
    assert read.parameters == {"k": "v"} and read.version_policy is None
    assert read.label_filename("z") == "labels.txt" and read.label_filename("x y") == ""
    carried = read.carried
    assert carried.model_transaction_policy.decoupled and carried.default_model_filename == "model.xml"
    assert list(carried.version_policy.specific.versions) == [2]
    assert read.triton_json()["backend"] == "openvino" and read.message().name == "m"
    said = ["m/config.pbtxt: backend 'openvino' has no conch step (conch has python",
            "m/config.pbtxt: input 'x y': tensor: tensor name 'x y' contains ' '",
            "m/config.pbtxt: output 'z': tensor 'z': label file ",
            "m/config.pbtxt: tensor 'h': data_type TYPE_BF16 has no"]
    assert len(read.refusals) == len(said) and all(r.startswith(s) for r, s in zip(read.refusals, said, strict=True))
    assert "has 2 lines, but dims [3] make 3 classes" in read.refusals[2]
    with pytest.raises(BuildError, match="m/config.pbtxt: backend 'openvino' has no conch step"):
        read.spec  # noqa: B018
    with pytest.raises(BuildError, match="m/config.pbtxt: backend 'openvino' has no conch step"):
        read_config(text, tmp_path, "m/config.pbtxt", strict=True)


def test_a_version_policy_conch_declares_is_typed_and_not_carried() -> None:
    read = read_config('name: "m" backend: "python" version_policy { latest { num_versions: 2 } } '
                       'output { name: "y" data_type: TYPE_FP32 dims: [ 1 ] }')
    assert read.version_policy == VersionPolicy(latest=2) and not read.carried.HasField("version_policy")
    assert read.refusals == () and read.spec.settings.version_policy == VersionPolicy(latest=2)


def test_importing_conch_loads_the_config_proto_without_grpc() -> None:
    """Every command imports conch, and conch imports the reader (through the executor): Triton's
    ModelConfig proto comes without tritonclient.grpc's package, which imports gRPC and asyncio."""
    import subprocess
    import sys

    probe = "import sys, conch; print(sorted(m for m in ('grpc', 'tritonclient.grpc') if m in sys.modules))"
    shown = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120)
    assert shown.stdout.strip() == "[]", shown.stdout + shown.stderr
