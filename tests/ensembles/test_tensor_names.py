"""Intermediate tensors: named ``<step>.<output>`` unless a handle is ``.named(...)``, so a declaration can
reproduce an existing ensemble's configs (seed 002's DALI -> Inception ensemble wires `preprocessed_image`)."""

from __future__ import annotations

from pathlib import Path

import basic_steps
import pytest
from google.protobuf import text_format
from seed_archives import inception_repo
from tritonclient.grpc import model_config_pb2

from conch import DaliStep, DeclarationError, Ensemble, InstanceGroup, PythonStep, Tensor, TensorFlowStep
from conch.compiler.pbtxt import render_config


def parse(text: str) -> model_config_pb2.ModelConfig:
    config = model_config_pb2.ModelConfig()
    text_format.Parse(text, config)
    return config


def _pipeline() -> None:
    """Stands for the DALI pipeline: only the declaration is rendered here."""


def seed_002(labels: Path) -> Ensemble:
    dali = DaliStep("dali", _pipeline, inputs=[Tensor("DALI_INPUT_0", "UINT8", [-1])],
                    outputs=[Tensor("DALI_OUTPUT_0", "FP32", [299, 299, 3])], max_batch_size=256, num_threads=12)
    inception = TensorFlowStep(
        "inception_graphdef", lambda: b"", inputs=[Tensor("input", "FP32", [299, 299, 3])],
        outputs=[Tensor("InceptionV3/Predictions/Softmax", "FP32", [1001], labels=labels)],
        max_batch_size=256, instance_group=InstanceGroup("KIND_GPU"),
    )
    ens = Ensemble("ensemble_dali_inception", max_batch_size=256, step_prefix="")
    image = dali(ens.input("INPUT", "UINT8", [-1])).named("preprocessed_image")
    ens.output("OUTPUT", inception(image))
    return ens


def test_a_declaration_reproduces_seed_002s_configs(tmp_path: Path) -> None:
    """The seed's three config.pbtxt files (as the post prints them, braces restored), from a declaration."""
    seed = inception_repo()
    labels = tmp_path / "inception_labels.txt"
    labels.write_bytes(seed["inception_graphdef/inception_labels.txt"] or b"")
    ens = seed_002(labels)
    ens.validate()
    rendered = {"ensemble_dali_inception": ens.spec()}
    rendered |= {ens.model_name(c.step): c.step.spec(ens.model_name(c.step)) for c in ens.calls}
    for model, spec in rendered.items():
        expected = parse((seed[f"{model}/config.pbtxt"] or b"").decode())
        for group in expected.instance_group:
            group.count = group.count or 1  # Triton's default; conch writes it out
        assert parse(render_config(spec)) == expected, model


def _ensemble() -> tuple[Ensemble, PythonStep]:
    ens = Ensemble("e", max_batch_size=8)
    s = PythonStep("s", basic_steps.double, inputs=[Tensor("x", "FP32", [4])],
                   outputs=[Tensor("y", "FP32", [4])], max_batch_size=8)
    return ens, s


def test_intermediates_are_named_after_step_and_output_by_default() -> None:
    ens, s = _ensemble()
    t = PythonStep("t", basic_steps.double, inputs=[Tensor("x", "FP32", [4])],
                   outputs=[Tensor("y", "FP32", [4])], max_batch_size=8)
    ens.output("Y", t(s(ens.input("X", "FP32", [4]))))
    (first, second) = parse(render_config(ens.spec())).ensemble_scheduling.step
    assert dict(first.output_map) == {"y": "s.y"} and dict(second.input_map) == {"x": "s.y"}


def _named(name: str, *, taken_by: str = "") -> None:
    ens, s = _ensemble()
    x = ens.input("X", "FP32", [4])
    other = PythonStep("o", basic_steps.double, inputs=[Tensor("x", "FP32", [4])], outputs=[Tensor("y", "FP32", [4])],
                       max_batch_size=8)
    by_other = other(x)
    if taken_by:
        by_other.named(taken_by)
    s(x).named(name)


@pytest.mark.parametrize(("declare", "message"), [
    (lambda: _named("X"), r"ensemble 'e': naming output 'y' of step 's': tensor 'X' is already declared"),
    (lambda: _named("pixels", taken_by="pixels"),
     r"naming output 'y' of step 's': tensor name 'pixels' is taken by output 'y' of step 'o'; choose another"),
    (lambda: _named("o.y"), r"tensor name 'o.y' is taken by output 'y' of step 'o'"),
    (lambda: _named("two words"), r"naming output 'y' of step 's': tensor name 'two words' contains ' '"),
    (lambda: _named(""), r"a tensor name must be a non-empty string"),
])
def test_a_name_that_clashes_or_is_invalid_is_refused(declare, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(DeclarationError, match=message):
        declare()


def test_inputs_outputs_and_foreign_handles_are_not_renamed() -> None:
    ens, s = _ensemble()
    x = ens.input("X", "FP32", [4])
    with pytest.raises(DeclarationError, match=r"naming ensemble input 'X': an ensemble input is named by"):
        x.named("x2")
    y = s(x)
    ens.output("Y", y)
    with pytest.raises(DeclarationError, match=r"it is ensemble output 'Y', which names it already"):
        y.named("y2")
    other, _ = _ensemble()
    with pytest.raises(DeclarationError, match=r"it belongs to ensemble 'e'"):
        other.name_tensor(y, "y3")


def test_a_later_input_or_output_cannot_take_a_given_name() -> None:
    ens, s = _ensemble()
    s(ens.input("X", "FP32", [4])).named("pixels")
    with pytest.raises(DeclarationError, match=r"tensor name 'pixels' is taken by output 'y' of step 's'"):
        ens.input("pixels", "FP32", [4])
