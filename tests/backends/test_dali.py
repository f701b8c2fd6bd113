"""DALI steps: serialization without a GPU that is deterministic and free of paths, declared outputs
baked into the pipeline, GPU operators moved to the CPU for the stand-in, autoserialization; the serialized
pipeline and its CPU check remembered by content."""

from __future__ import annotations

import importlib.util
import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import dali_pipelines
import numpy as np
import nvidia.dali  # noqa: F401 - a missing or broken DALI fails the run, never skips it
import pytest

from conch import BuildError, DaliStep, DeclarationError, DType, Ensemble, Release, Tensor
from conch.backends import dali as dali_module
from conch.backends import dali_serialized
from conch.backends.standins.dali_runner import DaliRunner
from conch.builder.repository_build import render_repository
from conch.cache import pure_key, refreshing

FIXTURES = Path(dali_pipelines.__file__).parent


def affine(**kw) -> DaliStep:  # type: ignore[no-untyped-def]
    return DaliStep("affine", dali_pipelines.affine, inputs=[Tensor("DALI_INPUT_0", "FP32", [4])],
                    outputs=[Tensor("DALI_OUTPUT_0", "FP32", [4])], max_batch_size=8, **kw)


def decode(**kw) -> DaliStep:  # type: ignore[no-untyped-def]
    return DaliStep("decode", dali_pipelines.decode_resize, inputs=[Tensor("IMAGES", "UINT8", [-1])],
                    outputs=[Tensor("PIXELS", "FP32", [32, 32, 3])], max_batch_size=4, **kw)


def one_step(step: DaliStep) -> Ensemble:
    ens = Ensemble("pre", max_batch_size=step.max_batch_size)
    (t,) = step.inputs
    ens.output("OUT", step(ens.input("IN", t.dtype, t.dims)))
    return ens


_SERIALIZE = """
import sys
sys.path.insert(0, sys.argv[1])
import dali_pipelines
from conch import DaliStep, Tensor
step = DaliStep("affine", dali_pipelines.affine, inputs=[Tensor("DALI_INPUT_0", "FP32", [4])],
                outputs=[Tensor("DALI_OUTPUT_0", "FP32", [4])], max_batch_size=8)
sys.stdout.buffer.write(step.serialized())
"""


def test_serialization_is_deterministic_and_carries_no_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONCH_CACHE_DIR", str(tmp_path / "cache"))  # serialized here and there, not remembered
    data = affine().serialized()
    assert str(FIXTURES).encode() not in data and b"dali_pipelines" not in data
    elsewhere = tmp_path / "elsewhere"  # the same pipeline code at another path, in another process
    elsewhere.mkdir()
    shutil.copy(FIXTURES / "dali_pipelines.py", elsewhere)
    env = {**os.environ, "PYTHONHASHSEED": "7", "CONCH_CACHE_DIR": str(tmp_path / "other-cache")}
    out = subprocess.run([sys.executable, "-c", _SERIALIZE, str(elsewhere)], capture_output=True, check=True,
                         env=env, timeout=120).stdout
    assert out == data


def test_tracing_is_restored_after_serializing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nvidia.dali._utils import dali_trace

    monkeypatch.setenv("CONCH_CACHE_DIR", str(tmp_path))  # serialized, not read from the cache

    before = dali_trace.is_tracing_enabled()
    affine().serialized()
    assert dali_trace.is_tracing_enabled() == before


def test_declared_outputs_are_baked_into_the_pipeline() -> None:
    (out,) = dali_serialized.outputs(decode().serialized(), "decode")
    assert (out.dtype, out.ndim) == (DType.FP32, 3)


def test_gpu_operators_move_to_the_cpu() -> None:
    data = decode().serialized()
    assert "decoders__Image" in dali_serialized.gpu_operators(data, "decode")
    assert dali_serialized.gpu_operators(dali_serialized.on_cpu(data, "decode"), "decode") == []
    assert dali_serialized.gpu_operators(data, "decode"), "the production pipeline keeps its GPU operators"


def test_production_layout_and_num_threads() -> None:
    repo = render_repository(one_step(decode(num_threads=12)), "production", "24.10")
    config = repo.files["pre__decode/config.pbtxt"].decode()  # type: ignore[union-attr]
    assert 'backend: "dali"' in config and "max_batch_size: 4" in config
    assert 'key: "num_threads"\n  value: { string_value: "12" }' in config
    assert repo.files["pre__decode/1/model.dali"] == decode(num_threads=12).serialized()


def test_local_layout_notes_the_swapped_operators() -> None:
    repo = render_repository(one_step(decode()), "local", "24.10")
    assert any("GPU operators decoders__Image" in n and "CPU versions" in n for n in repo.notes)


class _Context:
    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def file(self, name: str) -> str:
        return str(self.folder / name)


def jpeg(height: int, width: int, seed: int) -> bytes:
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG")
    return buffer.getvalue()


def test_standin_runner_decodes_a_zero_padded_batch(tmp_path: Path) -> None:
    standin = decode().standin()
    for name, source in standin.files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)  # the runner's own file is in standin/
        (tmp_path / name).write_bytes(source if isinstance(source, bytes) else source.read_bytes())
    runner = DaliRunner()
    runner.setup(_Context(tmp_path))
    images = [jpeg(40, 60, 0), jpeg(70, 30, 1), jpeg(32, 32, 2), jpeg(50, 50, 3), jpeg(20, 90, 4)]
    batch = np.zeros((5, max(len(b) for b in images)), dtype=np.uint8)
    for row, data in enumerate(images):
        batch[row, : len(data)] = np.frombuffer(data, dtype=np.uint8)
    out = runner(IMAGES=batch)["PIXELS"]  # 5 rows > max_batch_size 4: run in two pipeline batches
    assert out.shape == (5, 32, 32, 3) and out.dtype == np.float32
    alone = runner(IMAGES=np.frombuffer(images[4], dtype=np.uint8)[None, :])["PIXELS"]
    np.testing.assert_array_equal(out[4:], alone)


def test_autoserialize_ships_python_that_dali_serializes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    step = decode(autoserialize=True, num_threads=2)
    repo = render_repository(one_step(step), "production", "24.10")
    version = tmp_path / "1"
    version.mkdir()
    for name in ("dali.py", "dali_pipelines.py"):
        source = repo.files[f"pre__decode/1/{name}"]
        (version / name).write_bytes(source if isinstance(source, bytes) else source.read_bytes())
    assert "pre__decode/1/model.dali" not in repo.files
    monkeypatch.delitem(sys.modules, "dali_pipelines")  # import the copy in the model folder
    monkeypatch.setattr(sys, "path", list(sys.path))
    spec = importlib.util.spec_from_file_location("autoserialized_model", version / "dali.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # as DALI's backend loads it
    assert Path(sys.modules["dali_pipelines"].__file__ or "").parent == version
    from nvidia.dali._utils.autoserialize import invoke_autoserialize

    invoke_autoserialize(module, str(tmp_path / "model.dali"))
    data = (tmp_path / "model.dali").read_bytes()
    assert [s.name for s in dali_serialized.external_sources(data, "decode")] == ["IMAGES"]
    (out,) = dali_serialized.outputs(data, "decode")
    assert (out.dtype, out.ndim) == (DType.FP32, 3)


def test_a_serialized_pipeline_can_be_given_as_bytes() -> None:
    data = decode().serialized()
    step = DaliStep("decode", data, inputs=[Tensor("IMAGES", "UINT8", [-1])],
                    outputs=[Tensor("PIXELS", "FP32", [32, 32, 3])],
                    max_batch_size=4)
    assert step.serialized() == data


def test_untyped_external_sources_accept_any_declared_dtype() -> None:
    step = DaliStep("two", dali_pipelines.two_outputs, inputs=[Tensor("DALI_INPUT_0", "INT32", [-1])],
                    outputs=[Tensor("DOUBLED", "INT32", [-1]), Tensor("NEGATED", "INT32", [-1])], max_batch_size=2)
    step.check(Release.of("24.10"))


def test_refusals_at_declaration() -> None:
    with pytest.raises(DeclarationError, match=r"DALI's Triton backend needs max_batch_size >= 1"):
        DaliStep("x", dali_pipelines.affine, inputs=[Tensor("DALI_INPUT_0", "FP32", [4])],
                 outputs=[Tensor("Y", "FP32", [4])], max_batch_size=0)
    with pytest.raises(DeclarationError, match=r"tensor 'TEXT' is BYTES, which DALI's Triton backend does not"):
        DaliStep("x", dali_pipelines.affine, inputs=[Tensor("TEXT", "BYTES", [1])], outputs=[Tensor("Y", "FP32", [4])],
                 max_batch_size=2)
    with pytest.raises(DeclarationError, match=r"autoserialize=True ships the pipeline's Python code"):
        DaliStep("x", b"serialized", inputs=[Tensor("DALI_INPUT_0", "FP32", [4])], outputs=[Tensor("Y", "FP32", [4])],
                 max_batch_size=2, autoserialize=True)
    with pytest.raises(BuildError, match=r"dali step 'x': model.dali is not a serialized DALI pipeline"):
        DaliStep("x", b"\xff\xfe junk", inputs=[Tensor("DALI_INPUT_0", "FP32", [4])],
                 outputs=[Tensor("Y", "FP32", [4])],
                 max_batch_size=2).check(Release.of("24.10"))


def two_sources():  # type: ignore[no-untyped-def]
    import nvidia.dali.fn as fn

    return fn.external_source(name="A", device="cpu") + fn.external_source(name="B", device="cpu")


def broken():  # type: ignore[no-untyped-def]
    raise ValueError("no such operator argument")


def _function_in(path: Path, source: str):  # type: ignore[no-untyped-def]
    """``pipeline`` as defined by the file ``path`` (whose whole text is ``source``), without running it."""
    path.write_text(source)
    namespace: dict[str, object] = {"__name__": path.stem}
    exec(compile("def pipeline():\n    pass\n", str(path), "exec"), namespace)
    return namespace["pipeline"]


def _declared(pipeline, inputs, outputs, **kw) -> DaliStep:  # type: ignore[no-untyped-def]
    return DaliStep("x", pipeline, inputs=inputs, outputs=outputs, max_batch_size=4, **kw)


@pytest.mark.parametrize(("make", "error", "message"), [
    (lambda: affine(num_threads=0), DeclarationError, r"dali step 'affine': num_threads must be >= 1, got 0"),
    (lambda: _declared(42, [Tensor("A", "FP32", [4])], [Tensor("Y", "FP32", [4])]), DeclarationError,
     r"dali step 'x': pipeline must be a pipeline function or a serialized pipeline \(bytes or a path\), got int"),
    (lambda: _declared(two_sources, [Tensor("A", "FP32", [4])], [Tensor("Y", "FP32", [4])]), BuildError,
     r"dali step 'x': the pipeline's external_source 'B' has no declared input; DALI's backend feeds every"),
    (lambda: _declared(broken, [Tensor("A", "FP32", [4])], [Tensor("Y", "FP32", [4])]), BuildError,
     r"dali step 'x': building the pipeline from broken failed: ValueError: no such operator argument"),
    (lambda: DaliStep("decode", decode().serialized(), inputs=[Tensor("IMAGES", "UINT8", [-1])],
                      outputs=[Tensor("PIXELS", "INT32", [32, 32, 3])], max_batch_size=4), BuildError,
     r"output 'PIXELS' \(pipeline output 0\) is declared INT32 but the pipeline declares FP32"),
    (lambda: DaliStep("decode", decode().serialized(), inputs=[Tensor("IMAGES", "UINT8", [-1])],
                      outputs=[Tensor("PIXELS", "FP32", [1024])], max_batch_size=4), BuildError,
     r"output 'PIXELS' \(pipeline output 0\) is declared with dims \[1024\] but the pipeline declares ndim=3"),
], ids=["num-threads", "not-a-pipeline", "unfed-source", "pipeline-raises", "output-dtype", "output-ndim"])
def test_pipelines_dali_cannot_serve_as_declared_are_refused(make, error: type[Exception], message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(error, match=message):
        make().check(Release.of("24.10"))


@pytest.mark.parametrize(("file", "source", "message"), [
    ("dali.py", "def pipeline():\n    pass\n", r"the pipeline lives in dali.py, a name the generated files use"),
    ("conch_pipes.py", "import conch\n\n\ndef pipeline():\n    pass\n",
     r"conch_pipes.py imports conch, but with autoserialize=True it is imported by DALI inside Triton"),
], ids=["reserved-name", "imports-conch"])
def test_autoserialized_pipelines_triton_cannot_import_are_refused(tmp_path: Path, file: str, source: str,
                                                                   message: str) -> None:
    with pytest.raises(DeclarationError, match=rf"dali step 'x': {message}"):
        _declared(_function_in(tmp_path / file, source), [Tensor("A", "FP32", [4])], [Tensor("Y", "FP32", [4])],
                  autoserialize=True)
    with pytest.raises(DeclarationError, match=r"with autoserialize=True the pipeline function must be defined at "
                                               r"the top level of a module"):
        _declared(lambda: None, [Tensor("A", "FP32", [4])], [Tensor("Y", "FP32", [4])], autoserialize=True)


def test_an_empty_serialized_pipeline_is_refused() -> None:
    with pytest.raises(BuildError, match=r"dali step 'x': model.dali holds no operators; is it a serialized DALI"):
        _declared(b"", [Tensor("A", "FP32", [4])], [Tensor("Y", "FP32", [4])]).check(Release.of("24.10"))


_PIPELINE = """
def scaled():
    import nvidia.dali.fn as fn
    import nvidia.dali.types as types

    x = fn.external_source(name="DALI_INPUT_0", device="cpu", dtype=types.FLOAT, ndim=1)
    return x.gpu() * SCALE


def make(scale):
    def closed():
        import nvidia.dali.fn as fn
        import nvidia.dali.types as types

        x = fn.external_source(name="DALI_INPUT_0", device="cpu", dtype=types.FLOAT, ndim=1)
        return x * scale

    return closed
"""


def _pipeline_module(folder: Path, name: str, scale: float) -> object:
    """A module of pipeline functions written now (a new name per version: Python caches modules by name)."""
    path = folder / f"{name}.py"
    path.write_text(f"SCALE = {scale}\n" + _PIPELINE)
    # Python takes a module's bytecode cache as current when the source's size and mtime (in whole seconds)
    # match: a version written within the second of the last, at the same size, would run the last one's code.
    Path(importlib.util.cache_from_source(str(path))).unlink(missing_ok=True)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _scaled_step(definition: object, pure: bool = True) -> DaliStep:
    """A step over ``definition``, declared pure unless asked otherwise."""
    return DaliStep("scaled", definition, inputs=[Tensor("DALI_INPUT_0", "FP32", [4])],  # type: ignore[arg-type]
                    outputs=[Tensor("DALI_OUTPUT_0", "FP32", [4])], max_batch_size=8, pure=pure)


class _Counted:
    """How often DALI serialized a pipeline function and built a CPU pipeline in this process."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.serialized = self.built = 0
        serialize, build = dali_module.serialize_pipeline, DaliStep._build_on_cpu

        def counted_serialize(*args, **kwargs):  # type: ignore[no-untyped-def]
            self.serialized += 1
            return serialize(*args, **kwargs)

        def counted_build(step: DaliStep, cpu: bytes) -> bool:
            self.built += 1
            return build(step, cpu)

        monkeypatch.setattr(dali_module, "serialize_pipeline", counted_serialize)
        monkeypatch.setattr(DaliStep, "_build_on_cpu", counted_build)


def test_an_unchanged_pipeline_is_not_serialized_or_built_on_the_cpu_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONCH_CACHE_DIR", str(tmp_path / "cache"))
    counted = _Counted(monkeypatch)
    module = _pipeline_module(tmp_path, "pipes_v1", 2.0)
    first = _scaled_step(module.scaled).standin()  # type: ignore[attr-defined]
    assert (counted.serialized, counted.built) == (1, 1)
    again = _scaled_step(module.scaled).standin()  # type: ignore[attr-defined]
    assert (counted.serialized, counted.built) == (1, 1), "an unchanged step serialized or built its pipeline again"
    assert again.files == first.files

    with refreshing():  # conch build --refresh: derived again
        refreshed = _scaled_step(module.scaled).standin()  # type: ignore[attr-defined]
    assert (counted.serialized, counted.built) == (2, 2) and refreshed.files == first.files
    counted.serialized = counted.built = 1

    changed = _pipeline_module(tmp_path, "pipes_v1", 3.0)  # the same file and function, other code
    third = _scaled_step(changed.scaled).standin()  # type: ignore[attr-defined]
    assert (counted.serialized, counted.built) == (2, 2)
    assert third.files[dali_module.FILENAME] != first.files[dali_module.FILENAME]

    for _ in range(2):  # not declared pure: serialized at every build
        assert _scaled_step(changed.scaled, pure=False).serialized() == _scaled_step(changed.scaled).serialized()  # type: ignore[attr-defined]
    assert counted.serialized == 4


def test_a_pipeline_is_remembered_per_batch_size_and_closure_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONCH_CACHE_DIR", str(tmp_path / "cache"))
    counted = _Counted(monkeypatch)
    module = _pipeline_module(tmp_path, "pipes_closures", 2.0)
    two, three = (_scaled_step(module.make(s)).serialized() for s in (2.0, 3.0))  # type: ignore[attr-defined]
    assert two != three and counted.serialized == 2
    assert _scaled_step(module.make(3.0)).serialized() == three and counted.serialized == 2  # type: ignore[attr-defined]
    wider = DaliStep("scaled", module.make(3.0), inputs=[Tensor("DALI_INPUT_0", "FP32", [4])],  # type: ignore[attr-defined]
                     outputs=[Tensor("DALI_OUTPUT_0", "FP32", [4])], max_batch_size=16, pure=True)
    assert wider.serialized() != three and counted.serialized == 3
    opaque = module.make(object())  # type: ignore[attr-defined]
    assert pure_key(opaque) is None  # not told by content: serialized every time


def test_pure_must_be_a_bool() -> None:
    with pytest.raises(DeclarationError, match="dali step 'scaled': pure must be True or False, got 'yes'"):
        _scaled_step(dali_pipelines.affine, pure="yes")  # type: ignore[arg-type]


_UNCHANGED_LOCAL_BUILD = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("pipes_local", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
from conch import DaliStep, Ensemble, Tensor
from conch.builder.repository_build import render_repository
from conch.cache import pure_key, refreshing
step = DaliStep("scaled", module.scaled, inputs=[Tensor("DALI_INPUT_0", "FP32", [4])],
                outputs=[Tensor("DALI_OUTPUT_0", "FP32", [4])], max_batch_size=8, pure=True)
ens = Ensemble("pre", max_batch_size=8)
ens.output("OUT", step(ens.input("IN", "FP32", [4])))
repo = render_repository(ens, "local", "24.10")
data = repo.files["pre__scaled/1/files/model.dali"]
sys.stdout.buffer.write(data if isinstance(data, bytes) else open(data, "rb").read())
print("\\nDALI imported:", "nvidia.dali" in sys.modules)
"""


def test_an_unchanged_local_build_of_a_dali_step_does_not_import_dali(tmp_path: Path) -> None:
    _pipeline_module(tmp_path, "pipes_local", 2.0)
    env = {**os.environ, "CONCH_CACHE_DIR": str(tmp_path / "cache")}
    runs = [subprocess.run([sys.executable, "-c", _UNCHANGED_LOCAL_BUILD, str(tmp_path / "pipes_local.py")],
                           capture_output=True, check=True, env=env, timeout=120).stdout for _ in range(2)]
    assert runs[0].endswith(b"DALI imported: True\n"), "the first build serializes the pipeline with DALI"
    assert runs[1].endswith(b"DALI imported: False\n")
    assert runs[1] == runs[0].replace(b"True", b"False")  # the same stand-in pipeline bytes
