"""TensorRT steps: what happens without a GPU (a build that must compile says how to proceed; a plan
without ONNX source has no CPU stand-in), optimization profiles, and, with a stand-in tensorrt module that
follows TensorRT 8's and 10's documented Python API, the compile and inspect paths that only run on GPU
hosts: engine I/O dtypes, failing parses and builds, version mismatches."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import fake_tensorrt
import onnx_models
import pytest
from google.protobuf import text_format
from onnx import TensorProto
from tritonclient.grpc import model_config_pb2

from conch import BuildError, DeclarationError, Ensemble, Tensor, TensorRTStep, Warmup
from conch.backends.tensorrt import profile_shapes
from conch.builder.repository_build import build_ensemble, render_repository

ModelConfig = model_config_pb2.ModelConfig


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


# Each TensorRT major version with a Triton release that carries it.
TENSORRT = {"8": ("8.6.1", "24.04"), "10": ("10.5.0", "24.10")}


def use_tensorrt(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, version: str, gpu: bool = True) -> None:
    monkeypatch.setenv("CONCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setitem(sys.modules, "tensorrt", fake_tensorrt.module(version, gpu=gpu))


def compiled(repo) -> dict:  # type: ignore[no-untyped-def]
    return fake_tensorrt.read_plan(repo.files["trt__resnet/1/model.plan"].read_bytes())


def test_compiling_without_a_gpu_fails_saying_how_to_proceed(tmp_path: Path, no_tensorrt: None) -> None:
    step = TensorRTStep("resnet", onnx_models.affine(tmp_path / "a.onnx"), max_batch_size=8)
    with pytest.raises(BuildError) as caught:
        build_ensemble(one_step(step), tmp_path / "dist", "production", "24.10")
    message = str(caught.value)
    assert message.startswith("ensemble 'trt': tensorrt step 'resnet': compiling model.onnx into a TensorRT plan "
                              "needs an NVIDIA GPU and the tensorrt Python package")
    assert "Build on a GPU host" in message and "nvcr.io/nvidia/tritonserver:24.10-py3" in message
    assert "pass plan= with a model.plan prebuilt there" in message
    assert not (tmp_path / "dist").exists() or not list((tmp_path / "dist").iterdir())
    local = render_repository(one_step(step), "local", "24.10")  # the ONNX stand-in needs no GPU
    assert "trt__resnet/1/files/model.onnx" in local.files and "trt__resnet/1/model.plan" not in local.files
    assert 'backend: "python"' in local.files["trt__resnet/config.pbtxt"].decode()  # type: ignore[union-attr]


def test_a_plan_without_onnx_source_has_no_cpu_standin(tmp_path: Path) -> None:
    step = TensorRTStep("resnet", plan=b"engine", inputs=[Tensor("x", "FP32", [4])],
                        outputs=[Tensor("y", "FP32", [4])], max_batch_size=8)
    with pytest.raises(BuildError, match=r"ensemble 'trt': tensorrt step 'resnet' has no CPU stand-in: it is "
                                         r"given only a prebuilt plan.*give the model's ONNX source as the second "
                                         r"argument \(and the plan as plan=\)"):
        build_ensemble(one_step(step), tmp_path, "local", "24.10")
    assert not list(tmp_path.iterdir())
    repo = render_repository(one_step(step), "production", "24.10")
    assert repo.files["trt__resnet/1/model.plan"] == b"engine"
    assert any("model.plan was not inspected" in n for n in repo.notes)


def test_declarations_needed_without_readable_onnx(tmp_path: Path) -> None:
    with pytest.raises(DeclarationError, match=r"tensorrt step 'resnet': give its model as the second argument: the "
                       r"ONNX model \(compiled into a plan, and run locally\) or a prebuilt plan \(bytes or a .plan "
                       r"file\); plan= adds a prebuilt plan beside the ONNX model"):
        TensorRTStep("resnet", inputs=[Tensor("x", "FP32", [4])], outputs=[Tensor("y", "FP32", [4])])
    with pytest.raises(DeclarationError, match=r"a plan cannot be read here, so declare inputs= and outputs="):
        TensorRTStep("resnet", plan=b"engine", max_batch_size=8)
    with pytest.raises(DeclarationError, match=r"onnx is a function, so declare inputs= and outputs="):
        TensorRTStep("resnet", lambda: tmp_path / "a.onnx", max_batch_size=8)


def test_profiles_span_batch_and_dynamic_dims() -> None:
    inputs = [Tensor("ids", "INT64", [-1]), Tensor("image", "FP32", [3, 8])]
    shapes = profile_shapes("s", inputs, 16, {"ids": [128]})
    assert shapes == {"ids": ([1, 1], [16, 128], [16, 128]), "image": ([1, 3, 8], [16, 3, 8], [16, 3, 8])}
    with pytest.raises(BuildError, match=r"input 'ids' has dims \[-1\]; compiling needs the largest size of each "
                                         r"-1 dim, e.g. max_dims="):
        profile_shapes("s", inputs, 16, {})


def test_compiled_plan_records_the_tensorrt_version(tmp_path: Path, fake_trt) -> None:  # type: ignore[no-untyped-def]
    step = TensorRTStep("resnet", onnx_models.affine(tmp_path / "a.onnx"), max_batch_size=8, fp16=True,
                        warmup=Warmup("bs8", batch_size=8))
    repo = render_repository(one_step(step), "production", "24.10")
    data = repo.files["trt__resnet/1/model.plan"].read_bytes()  # type: ignore[union-attr]
    plan = fake_tensorrt.read_plan(data)
    assert plan["flags"] == ["fp16"]
    assert {t["name"]: t["dtype"] for t in plan["io"]} == {"x": "FLOAT", "y": "FLOAT"}  # fp16 leaves I/O FP32
    assert [t["profile"] for t in plan["io"] if t["input"]] == [[[1, 4], [8, 4], [8, 4]]]
    # what Triton will read next to that engine agrees with it: the batch the config allows is the largest the
    # profile takes, and the config's I/O are the engine's (FP32, [4] past the batch)
    config = text_format.Parse(repo.files["trt__resnet/config.pbtxt"].decode(), ModelConfig())  # type: ignore[union-attr]
    (profile,) = [t["profile"] for t in plan["io"] if t["input"]]
    assert config.max_batch_size == profile[2][0] == 8 and config.platform == "tensorrt_plan"
    assert [(t.name, t.data_type, list(t.dims)) for t in (*config.input, *config.output)] == [
        ("x", model_config_pb2.TYPE_FP32, [4]), ("y", model_config_pb2.TYPE_FP32, [4])]
    (described,) = repo.manifest["steps"]
    assert described["tensorrt"] == {"fp16": True, "onnx_source": True, "plan": "compiled from onnx",
                                     "tensorrt_version": "10.99.0", "inspected": True}
    again = render_repository(one_step(step), "production", "24.10")  # from the plan cache: same bytes
    assert again.files["trt__resnet/1/model.plan"].read_bytes() == data  # type: ignore[union-attr]


def test_an_engine_smaller_than_max_batch_size_is_refused(tmp_path: Path, fake_trt) -> None:  # type: ignore[no-untyped-def]
    plan = fake_tensorrt.make_plan([
        {"name": "x", "input": True, "dtype": "FLOAT", "shape": [-1, 4], "profile": [[1, 4], [4, 4], [4, 4]]},
        {"name": "y", "input": False, "dtype": "FLOAT", "shape": [-1, 4], "profile": None},
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


@pytest.mark.parametrize("major", TENSORRT)
def test_compiles_with_each_tensorrt_major_version(major: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    version, release = TENSORRT[major]
    use_tensorrt(monkeypatch, tmp_path, version)
    step = TensorRTStep("resnet", onnx_models.affine(tmp_path / "a.onnx"), max_batch_size=8)
    repo = render_repository(one_step(step), "production", release)
    plan = compiled(repo)
    assert plan["version"] == version
    assert [t["profile"] for t in plan["io"] if t["input"]] == [[[1, 4], [8, 4], [8, 4]]]
    (described,) = repo.manifest["steps"]
    assert described["tensorrt"]["tensorrt_version"] == version and described["tensorrt"]["inspected"]


ENGINE_IO = [  # (ONNX element type, declared dtype, TensorRT major, the engine's dtype or the refusal)
    (TensorProto.INT32, "INT32", "8", "INT32"),
    (TensorProto.INT32, "INT32", "10", "INT32"),
    (TensorProto.FLOAT16, "FP16", "8", "HALF"),
    (TensorProto.FLOAT16, "FP16", "10", "HALF"),
    (TensorProto.INT64, "INT64", "10", "INT64"),
    (TensorProto.INT64, "INT64", "8", r"input 'x' is INT64, which TensorRT 8 \(Triton 24.04\) does not have: "
                                      r"model.plan takes it as INT32. Export the ONNX model with INT32 I/O"),
]


@pytest.mark.parametrize(("elem", "dtype", "major", "outcome"), ENGINE_IO,
                         ids=[f"{d}-trt{m}" for _, d, m, _ in ENGINE_IO])
def test_engine_io_dtypes(elem: int, dtype: str, major: str, outcome: str, tmp_path: Path,
                          monkeypatch: pytest.MonkeyPatch) -> None:
    version, release = TENSORRT[major]
    use_tensorrt(monkeypatch, tmp_path, version)
    step = TensorRTStep("resnet", onnx_models.identity(tmp_path / "i.onnx", elem, ["batch", 4]), max_batch_size=8)
    assert [t.dtype.wire for t in (*step.inputs, *step.outputs)] == [dtype, dtype]
    if " " in outcome:
        with pytest.raises(BuildError, match=outcome):
            render_repository(one_step(step), "production", release)
        return
    repo = render_repository(one_step(step), "production", release)
    assert {t["name"]: t["dtype"] for t in compiled(repo)["io"]} == {"x": outcome, "y": outcome}
    config = repo.files["trt__resnet/config.pbtxt"].decode()  # type: ignore[union-attr]
    assert config.count(f"TYPE_{dtype}") == 2


def test_a_model_tensorrt_cannot_parse_is_refused_with_the_parser_errors(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    use_tensorrt(monkeypatch, tmp_path, "10.5.0")
    custom = onnx_models.identity(tmp_path / "c.onnx", TensorProto.FLOAT, ["batch", 4], domain="com.example")
    step = TensorRTStep("resnet", custom, max_batch_size=8)
    with pytest.raises(BuildError, match=r"ensemble 'trt': tensorrt step 'resnet': TensorRT 10.5.0 cannot parse "
                                         r"model.onnx: In node 0 \(importModel\): UNSUPPORTED_NODE: No importer "
                                         r"registered for op: CustomIdentity"):
        build_ensemble(one_step(step), tmp_path / "dist", "production", "24.10")
    assert not (tmp_path / "dist").exists() or not list((tmp_path / "dist").iterdir())


def test_a_failing_build_says_what_tensorrt_logged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    use_tensorrt(monkeypatch, tmp_path, "8.6.1")
    step = TensorRTStep("resnet", onnx_models.identity(tmp_path / "s.onnx", TensorProto.FLOAT, ["batch", "seq"]),
                        max_batch_size=8, max_dims={"x": [0]})  # a profile TensorRT refuses: min 1 > max 0
    with pytest.raises(BuildError, match=r"tensorrt step 'resnet': TensorRT 8.6.1 could not build an engine from "
                                         r"model.onnx: .*x: axis 1 needs 0 <= min <= opt <= max, got 1, 0, 0"):
        render_repository(one_step(step), "production", "24.04")


def test_profiles_cover_dynamic_dims_up_to_max_dims(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    use_tensorrt(monkeypatch, tmp_path, "10.5.0")
    step = TensorRTStep("resnet", onnx_models.identity(tmp_path / "s.onnx", TensorProto.INT64, ["batch", "seq"]),
                        max_batch_size=8, max_dims={"x": [128]})
    plan = compiled(render_repository(one_step(step), "production", "24.10"))
    assert [t["profile"] for t in plan["io"] if t["input"]] == [[[1, 1], [8, 128], [8, 128]]]
    with pytest.raises(DeclarationError, match=r"max_dims names \['y'\], which are not inputs"):
        TensorRTStep("resnet", tmp_path / "s.onnx", max_batch_size=8, max_dims={"y": [128]})
    with pytest.raises(BuildError, match=r"max_dims\['x'\] is \[4, 4\], but input 'x' has dims \[-1\]; give one "
                                         r"size per dim"):
        render_repository(one_step(TensorRTStep("resnet", tmp_path / "s.onnx", max_batch_size=8,
                                                max_dims={"x": [4, 4]})), "production", "24.10")


def test_a_plan_for_another_tensorrt_version_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    use_tensorrt(monkeypatch, tmp_path, "10.5.0")
    step = TensorRTStep("resnet", onnx_models.affine(tmp_path / "a.onnx"), max_batch_size=8)
    render_repository(one_step(step), "production", "24.10")  # cached for TensorRT 10 ...
    with pytest.raises(BuildError, match=r"this host has TensorRT 10.5.0, but Triton 24.04 runs TensorRT 8.x, which "
                                         r"cannot load a plan built by another version"):
        render_repository(one_step(step), "production", "24.04")  # ... and not used for a TensorRT 8 release


def test_a_builder_without_a_cuda_device_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    use_tensorrt(monkeypatch, tmp_path, "10.5.0", gpu=False)
    step = TensorRTStep("resnet", onnx_models.affine(tmp_path / "a.onnx"), max_batch_size=8)
    with pytest.raises(BuildError, match=r"needs an NVIDIA GPU .*TensorRT cannot start a builder: TypeError: "
                                         r"pybind11::init\(\): factory function returned nullptr"):
        render_repository(one_step(step), "production", "24.10")


@pytest.mark.parametrize(("plan", "why"), [
    (b"", "TensorRT 10.5.0 here cannot read it: .*Magic tag does not match"),
    (fake_tensorrt.make_plan([], version="10.3.0"), "not compatible with this version of TensorRT, expecting "
                                                    "library version 10.5.0 got 10.3.0"),
], ids=["empty", "other-version"])
def test_a_prebuilt_plan_tensorrt_cannot_read_is_noted_with_the_reason(plan: bytes, why: str, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    use_tensorrt(monkeypatch, tmp_path, "10.5.0")
    step = TensorRTStep("resnet", plan=plan, inputs=[Tensor("x", "FP32", [4])], outputs=[Tensor("y", "FP32", [4])],
                        max_batch_size=8)
    repo = render_repository(one_step(step), "production", "24.10")
    (note,) = [n for n in repo.notes if "model.plan was not inspected" in n]
    assert re.search(why, note), note
    assert repo.manifest["steps"][0]["tensorrt"]["inspected"] is False


def test_a_prebuilt_plan_is_checked_against_the_declaration(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    use_tensorrt(monkeypatch, tmp_path, "10.5.0")
    plan = fake_tensorrt.make_plan([
        {"name": "x", "input": True, "dtype": "FLOAT", "shape": [-1, 4], "profile": [[1, 4], [8, 4], [8, 4]]},
        {"name": "logits", "input": False, "dtype": "BF16", "shape": [-1, 4], "profile": None},
    ], version="10.5.0")
    renamed = TensorRTStep("resnet", plan=plan, inputs=[Tensor("x", "FP32", [4])],
                           outputs=[Tensor("y", "FP32", [4])], max_batch_size=8)
    with pytest.raises(BuildError, match=r"output 'y' is not in model.plan, whose outputs are 'logits'"):
        render_repository(one_step(renamed), "production", "24.10")
    bf16 = TensorRTStep("resnet", plan=plan, inputs=[Tensor("x", "FP32", [4])],
                        outputs=[Tensor("logits", "FP32", [4])], max_batch_size=8)
    repo = render_repository(one_step(bf16), "production", "24.10")  # BF16 has no numpy (nor Triton) type: unchecked
    assert repo.manifest["steps"][0]["tensorrt"]["inspected"] is True


def test_onnx_source_must_be_a_file(tmp_path: Path) -> None:
    step = TensorRTStep("resnet", lambda: onnx_models.affine(tmp_path / "a.onnx").read_bytes(),
                        inputs=[Tensor("x", "FP32", [4])], outputs=[Tensor("y", "FP32", [4])], max_batch_size=8)
    with pytest.raises(BuildError, match=r"tensorrt step 'resnet': its ONNX source must be a file path \(a "
                                         r"function gave bytes\); return the .onnx file's path"):
        render_repository(one_step(step), "local", "24.10")
