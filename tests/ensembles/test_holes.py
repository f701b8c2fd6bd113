"""Each declaration Triton would refuse to load is refused where it is declared (or at build), with its
own message: none of them reaches the server."""

from __future__ import annotations

from pathlib import Path

import basic_steps
import pytest
from conftest import linear_ensemble

from conch import (
    DeclarationError,
    DynamicBatching,
    Ensemble,
    InstanceGroup,
    PythonStep,
    Tensor,
    VersionPolicy,
    Warmup,
)


def step(**options: object) -> PythonStep:
    return PythonStep("s", basic_steps.double, inputs=[Tensor("x", "FP32", [4])], outputs=[Tensor("y", "FP32", [4])],
                      max_batch_size=4, **options)  # type: ignore[arg-type]


@pytest.mark.parametrize(("name", "message"), [
    ("bad\x00name", r"name 'bad\\x00name' is not a safe folder name"),
    ("modèle", r"name 'mod\\xe8le' is not a safe folder name"),
    ("-flag", "is not a safe folder name"),
    ("x" * 250, "is 250 characters; keep model names to 128"),
    ("conch-envs", "is the name of a file conch writes in every archive"),
    ("conch-manifest.json", "is the name of a file conch writes in every archive"),
])
def test_model_names_triton_or_the_stub_would_refuse(name: str, message: str) -> None:
    with pytest.raises(DeclarationError, match=message):
        Ensemble(name)


def test_a_long_prefix_makes_step_names_too_long_at_validate() -> None:
    ens = linear_ensemble("e" * 120)
    with pytest.raises(DeclarationError, match="is 128|keep model names to 128"):
        ens.validate()


@pytest.mark.parametrize("name", ["é", "a\x00", "x;y", "a b", "tab\t", "a\\b", "q\"uote"])
def test_tensor_names_follow_the_rule_the_message_states(name: str) -> None:
    with pytest.raises(DeclarationError, match=r"use ASCII letters, digits, '_', '-', '\.', ':' and '/' only"):
        Tensor(name, "FP32", [1])


@pytest.mark.parametrize("name", ["InceptionV3/Predictions/Softmax", "serving_default_x:0", "INPUT__0", "a.b-c"])
def test_tensor_names_the_rule_allows(name: str) -> None:
    assert Tensor(name, "FP32", [1]).name == name


def test_empty_dims_are_refused() -> None:
    with pytest.raises(DeclarationError, match=r"tensor 'x': dims \[\] is empty, which Triton refuses; declare \[1\]"):
        Tensor("x", "FP32", [])


@pytest.mark.parametrize("dims", [[1.5], [2.0], ["3"], [True]])
def test_dims_are_whole_numbers_not_rounded(dims: list[object]) -> None:
    with pytest.raises(DeclarationError, match="must be a whole number"):
        Tensor("x", "FP32", dims)  # type: ignore[arg-type]


@pytest.mark.parametrize(("dims", "reshape", "message"), [
    ([4], [0, 4], r"reshape \[0, 4\] must be positive sizes or -1"),
    ([4], [-2, 2], r"reshape \[-2, 2\] must be positive sizes or -1"),
    ([4], [3], r"reshape \[3\] does not hold the same elements as dims \[4\]"),
    ([-1, 4], [8], r"reshape \[8\] does not hold the same elements as dims \[-1, 4\]"),
])
def test_reshapes_triton_would_refuse(dims: list[int], reshape: list[int], message: str) -> None:
    with pytest.raises(DeclarationError, match=message):
        Tensor("x", "FP32", dims, reshape=reshape)


@pytest.mark.parametrize(("dims", "reshape"), [([1], []), ([2, 3], [6]), ([-1, 4], [-1, 2, 2])])
def test_reshapes_triton_accepts(dims: list[int], reshape: list[int]) -> None:
    assert Tensor("x", "FP32", dims, reshape=reshape).reshape == tuple(reshape)


def test_version_policy_naming_versions_the_archive_lacks() -> None:
    with pytest.raises(DeclarationError, match=r"version_policy specific=\[2\]: conch lays out each model"):
        VersionPolicy(specific=(2,))
    assert VersionPolicy(specific=(1,)).specific == (1,)


def test_nul_in_parameters_is_refused() -> None:
    with pytest.raises(DeclarationError, match=r"parameter 'k' value 'a\\x00b' holds a NUL byte"):
        step(parameters={"k": "a\x00b"})
    with pytest.raises(DeclarationError, match="parameter 'k\\\\x00' holds a NUL byte"):
        step(parameters={"k\x00": "v"})


def test_other_control_characters_in_parameters_round_trip(tmp_path: Path) -> None:
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    from conch.builder.repository_build import render_repository

    ens = Ensemble("params", max_batch_size=4)
    ens.output("Y", step(parameters={"k": "tab\there\r\x01 \"q\" \\ ü"})(ens.input("X", "FP32", [4])))
    text = render_repository(ens, "local", "24.10").files["params__s/config.pbtxt"]
    config = text_format.Parse(text, model_config_pb2.ModelConfig())  # type: ignore[arg-type]
    assert config.parameters["k"].string_value == "tab\there\r\x01 \"q\" \\ ü"


def test_label_file_one_line_short(tmp_path: Path) -> None:
    labels = tmp_path / "labels.txt"
    labels.write_text("".join(f"class{i}\n" for i in range(999)))
    with pytest.raises(DeclarationError, match=r"label file .*labels.txt has 999 lines, but dims \[1000\] make 1000"):
        Tensor("probs", "FP32", [1000], labels=labels)
    labels.write_text("".join(f"class{i}\n" for i in range(1000)))
    assert Tensor("probs", "FP32", [1000], labels=labels).labels == labels


def test_label_file_that_does_not_exist(tmp_path: Path) -> None:
    with pytest.raises(DeclarationError, match=r"tensor 'probs': label file .*missing.txt does not exist"):
        Tensor("probs", "FP32", [3], labels=tmp_path / "missing.txt")


def test_labels_given_inline_must_match_the_classes() -> None:
    with pytest.raises(DeclarationError, match=r"2 labels are given, but dims \[3\] make 3 classes"):
        Tensor("probs", "FP32", [3], labels=["a", "b"])


@pytest.mark.parametrize(("make", "message"), [
    (lambda: InstanceGroup("KIND_CPU", count="2"), "instance_group count must be a whole number, got '2'"),
    (lambda: InstanceGroup(3), "instance_group kind 3"),  # type: ignore[arg-type]
    (lambda: DynamicBatching(max_queue_delay_microseconds=1.5), "max_queue_delay_microseconds must be a whole"),
    (lambda: Warmup("w", batch_size="1"), "model_warmup 'w' batch_size must be a whole number"),
    (lambda: VersionPolicy(latest=1.5), "version_policy latest must be a whole number"),
    (lambda: step(instance_group="KIND_GPU"), "instance_group takes conch.InstanceGroup values"),
    (lambda: step(dynamic_batching="yes"), "dynamic_batching takes True or conch.DynamicBatching"),
    (lambda: step(parameters=["k"]), "parameters must be a mapping"),
    (lambda: step(version_policy=1), "version_policy must be a conch.VersionPolicy"),
    (lambda: Ensemble("e", max_batch_size="8"), "ensemble 'e': max_batch_size must be a whole number"),
])
def test_mistyped_settings_are_declaration_errors_not_type_errors(make: object, message: str) -> None:
    with pytest.raises(DeclarationError, match=message):
        make()  # type: ignore[operator]
