"""TensorRT steps: what happens without a GPU (a build that must compile says how to proceed; a plan
without ONNX source has no CPU stand-in), optimization profiles, and, with a stand-in tensorrt module,
the compile and inspect paths that only run on GPU hosts."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import fake_tensorrt
import onnx_models
import pytest

from conch import BuildError, DeclarationError, Ensemble, Tensor, TensorRTStep, Warmup
from conch.backends.tensorrt import profile_shapes
from conch.builder.build import build_ensemble, render_repository


def one_step(step: TensorRTStep, name: str = "trt") -> Ensemble:
    ens = Ensemble(name, max_batch_size=step.max_batch_size)
    (x,) = step.inputs
    ens.output("Y", step(ens.input("X", x.dtype, x.dims)))
    return ens


@pytest.fixture
def no_tensorrt(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tensorrt", None)  # import tensorrt -> ImportError, as on this machine


@pytest.fixture
def fake_trt(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("CONCH_CACHE_DIR", str(tmp_path / "cache"))  # compiled plans are cached
    trt = fake_tensorrt.module()
    monkeypatch.setitem(sys.modules, "tensorrt", trt)
    return trt


def test_compiling_without_a_gpu_fails_saying_how_to_proceed(tmp_path: Path, no_tensorrt: None) -> None:
    step = TensorRTStep("resnet", onnx=onnx_models.affine(tmp_path / "a.onnx"), max_batch_size=8)
    with pytest.raises(BuildError) as caught:
        build_ensemble(one_step(step), tmp_path / "dist", "production", "24.10")
    message = str(caught.value)
    assert message.startswith("ensemble 'trt': tensorrt step 'resnet': compiling model.onnx into a TensorRT plan "
                              "needs an NVIDIA GPU and the tensorrt Python package")
    assert "Build on a GPU host" in message and "nvcr.io/nvidia/tritonserver:24.10-py3" in message
    assert "pass plan= with a model.plan prebuilt there" in message
    assert not (tmp_path / "dist").exists() or not list((tmp_path / "dist").iterdir())
    build_ensemble(one_step(step), tmp_path / "local", "local", "24.10")  # the ONNX stand-in needs no GPU


def test_a_plan_without_onnx_source_has_no_cpu_standin(tmp_path: Path) -> None:
    step = TensorRTStep("resnet", plan=b"engine", inputs=[Tensor("x", "FP32", [4])],
                        outputs=[Tensor("y", "FP32", [4])], max_batch_size=8)
    with pytest.raises(BuildError, match=r"ensemble 'trt': tensorrt step 'resnet' has no CPU stand-in: it is "
                                         r"given only a prebuilt plan.*pass onnx="):
        build_ensemble(one_step(step), tmp_path, "local", "24.10")
    assert not list(tmp_path.iterdir())
    repo = render_repository(one_step(step), "production", "24.10")
    assert repo.files["trt__resnet/1/model.plan"] == b"engine"
    assert any("model.plan was not inspected" in n for n in repo.notes)


def test_declarations_needed_without_readable_onnx(tmp_path: Path) -> None:
    with pytest.raises(DeclarationError, match=r"give plan= \(a prebuilt model.plan\), onnx="):
        TensorRTStep("resnet", inputs=[Tensor("x", "FP32", [4])], outputs=[Tensor("y", "FP32", [4])])
    with pytest.raises(DeclarationError, match=r"a plan cannot be read here, so declare inputs= and outputs="):
        TensorRTStep("resnet", plan=b"engine", max_batch_size=8)
    with pytest.raises(DeclarationError, match=r"onnx is a function, so declare inputs= and outputs="):
        TensorRTStep("resnet", onnx=lambda: tmp_path / "a.onnx", max_batch_size=8)


def test_profiles_span_batch_and_dynamic_dims() -> None:
    inputs = [Tensor("ids", "INT64", [-1]), Tensor("image", "FP32", [3, 8])]
    shapes = profile_shapes("s", inputs, 16, {"ids": [128]})
    assert shapes == {"ids": ([1, 1], [16, 128], [16, 128]), "image": ([1, 3, 8], [16, 3, 8], [16, 3, 8])}
    with pytest.raises(BuildError, match=r"input 'ids' has dims \[-1\]; compiling needs the largest size of each "
                                         r"-1 dim, e.g. max_dims="):
        profile_shapes("s", inputs, 16, {})


def test_compiled_plan_records_the_tensorrt_version(tmp_path: Path, fake_trt) -> None:  # type: ignore[no-untyped-def]
    step = TensorRTStep("resnet", onnx=onnx_models.affine(tmp_path / "a.onnx"), max_batch_size=8, fp16=True,
                        warmup=Warmup("bs8", batch_size=8))
    repo = render_repository(one_step(step), "production", "24.10")
    data = repo.files["trt__resnet/1/model.plan"].read_bytes()  # type: ignore[union-attr]
    plan = json.loads(data[len(b"FAKE-TRT-PLAN"):])
    assert plan["flags"] == ["fp16"]
    assert [t["profile"] for t in plan["io"] if t["input"]] == [[[1, 4], [8, 4], [8, 4]]]
    (described,) = repo.manifest["steps"]
    assert described["tensorrt"] == {"fp16": True, "onnx_source": True, "plan": "compiled from onnx",
                                     "tensorrt_version": "10.99.0", "inspected": True}
    again = render_repository(one_step(step), "production", "24.10")  # from the plan cache: same bytes
    assert again.files["trt__resnet/1/model.plan"].read_bytes() == data  # type: ignore[union-attr]


def test_an_engine_smaller_than_max_batch_size_is_refused(tmp_path: Path, fake_trt) -> None:  # type: ignore[no-untyped-def]
    plan = fake_tensorrt.make_plan([
        {"name": "x", "input": True, "dtype": "float32", "shape": [-1, 4], "profile": [[1, 4], [4, 4], [4, 4]]},
        {"name": "y", "input": False, "dtype": "float32", "shape": [-1, 4], "profile": None},
    ])
    step = TensorRTStep("resnet", plan=plan, inputs=[Tensor("x", "FP32", [4])], outputs=[Tensor("y", "FP32", [4])],
                        max_batch_size=8)
    with pytest.raises(BuildError, match=r"max_batch_size is 8 but model.plan's optimization profile takes batches "
                                         r"of at most 4 for input 'x'"):
        render_repository(one_step(step), "production", "24.10")
    wrong_dtype = TensorRTStep("resnet", plan=plan, inputs=[Tensor("x", "FP16", [4])],
                               outputs=[Tensor("y", "FP32", [4])], max_batch_size=4)
    with pytest.raises(BuildError, match=r"input 'x' is declared FP16 but model.plan has FP32"):
        render_repository(one_step(wrong_dtype), "production", "24.10")
