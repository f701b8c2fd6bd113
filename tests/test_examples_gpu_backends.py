"""The GPU-backend examples (DALI + TensorFlow, TorchScript, TensorRT): production layouts keep the seeds'
names and settings, the TensorRT one says why it cannot build here, and all four replay green on the
real tritonserver through their CPU stand-ins."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ExampleArchives

from conch import BuildError
from conch.builder.discover import discover
from conch.builder.repository_build import build_ensemble, render_repository
from conch.replays.local_replay import replay_archives

EXAMPLES = Path(__file__).parent.parent / "ensembles"
FILES = ("image_classifier.py", "resnet_pytorch.py", "resnet_tensorrt.py", "bert_torchscript.py")



def example(file: str):  # type: ignore[no-untyped-def]
    (ens,) = discover([EXAMPLES / file])
    return ens


def text(repo, name: str) -> str:  # type: ignore[no-untyped-def]
    data = repo.files[name]
    return data.decode() if isinstance(data, bytes) else data.read_text()


def test_image_classifier_production_layout() -> None:
    repo = render_repository(example("image_classifier.py"), "production", "24.10")
    dali = text(repo, "image_classifier__dali/config.pbtxt")
    assert 'backend: "dali"' in dali and "max_batch_size: 256" in dali and 'string_value: "12"' in dali
    assert "image_classifier__dali/1/model.dali" in repo.files
    graph = text(repo, "image_classifier__inception_graphdef/config.pbtxt")
    assert 'platform: "tensorflow_graphdef"' in graph and "kind: KIND_GPU" in graph
    assert 'name: "InceptionV3/Predictions/Softmax"' in graph and 'label_filename: "inception_labels.txt"' in graph
    labels = text(repo, "image_classifier__inception_graphdef/inception_labels.txt").splitlines()
    assert len(labels) == 1001 and labels[0] == "background"
    assert "image_classifier__inception_graphdef/1/model.graphdef" in repo.files
    schema = repo.manifest["schema"]
    assert schema["inputs"] == [{"name": "INPUT", "datatype": "UINT8", "dims": [-1], "shape": [-1, -1]}]
    assert schema["outputs"] == [{"name": "OUTPUT", "datatype": "FP32", "dims": [1001], "shape": [-1, 1001]}]


@pytest.mark.integration  # packs the bert tokenizer's environment: resolves against the package index
def test_torchscript_examples_production_layout() -> None:
    resnet = render_repository(example("resnet_pytorch.py"), "production", "24.10")
    config = text(resnet, "resnet_pytorch__resnet/config.pbtxt")
    assert 'platform: "pytorch_libtorch"' in config and "max_batch_size: 128" in config
    assert 'name: "INPUT__0"' in config and 'name: "OUTPUT__0"' in config
    assert "resnet_pytorch__resnet/1/model.pt" in resnet.files
    bert = render_repository(example("bert_torchscript.py"), "production", "24.10")
    config = text(bert, "bert_torchscript__bert/config.pbtxt")
    assert 'name: "input_ids"' in config and 'name: "attention_mask"' in config
    assert "EXECUTION_ENV_PATH" in text(bert, "bert_torchscript__tokenize/config.pbtxt")


def test_resnet_tensorrt_needs_a_gpu_for_production_but_replays_locally(tmp_path: Path) -> None:
    ens = example("resnet_tensorrt.py")
    if not os.path.exists("/dev/nvidia0"):
        with pytest.raises(BuildError, match=r"ensemble 'resnet_tensorrt': tensorrt step 'resnet': compiling "
                                             r"model.onnx into a TensorRT plan needs an NVIDIA GPU"):
            build_ensemble(ens, tmp_path, "production", "24.10")
    repo = render_repository(ens, "local", "24.10")
    config = text(repo, "resnet_tensorrt__resnet/config.pbtxt")
    assert 'name: "bs128 Warmup"' in config and "batch_size: 128" in config
    assert "resnet_tensorrt__resnet/1/files/model.onnx" in repo.files


def test_conch_build_continues_past_a_failing_ensemble(tmp_path: Path) -> None:
    if os.path.exists("/dev/nvidia0"):
        pytest.skip("with a GPU the TensorRT example may build")
    result = subprocess.run(
        [sys.executable, "-m", "conch.cli", "build", str(EXAMPLES / "resnet_tensorrt.py"),
         str(EXAMPLES / "resnet_pytorch.py"), "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 2, result.stderr
    assert "conch: error: ensemble 'resnet_tensorrt': tensorrt step 'resnet': compiling model.onnx" in result.stderr
    assert "conch: 1 of 2 ensembles failed to build: resnet_tensorrt" in result.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["resnet_pytorch.tar.gz"]


@pytest.mark.integration
def test_the_four_examples_replay_green(examples: ExampleArchives, triton) -> None:  # type: ignore[no-untyped-def]
    archives = [examples.archive(f, "local") for f in FILES]  # built once per run (test_run, test_verify)
    report = replay_archives(archives, server=triton)
    assert report.passed, report.table()
    assert {r.ensemble for r in report.rows} == {f.replace(".py", ".tar.gz") for f in FILES}


@pytest.mark.slow
def test_torch_tf_and_dali_archives_are_byte_identical_across_processes_and_caches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `conch build` process with an empty cache exports the GraphDef and TorchScript models and
    serializes the DALI pipeline itself: its production archives must be the bytes this process builds
    from an empty cache of its own, after it has traced another module (as a build of several ensembles,
    or a notebook, does: TorchScript then names the model's types ``___torch_mangle_N``)."""
    import torch
    import torch_modules

    torch.jit.trace(torch_modules.affine(), torch.zeros(2, 4))  # any module with a Linear layer
    monkeypatch.setenv("CONCH_CACHE_DIR", str(tmp_path / "cold-cache-here"))
    files = ("image_classifier.py", "resnet_pytorch.py")  # the TF/DALI archive is compared first
    here = [build_ensemble(example(f), tmp_path / "here", "production", "24.10") for f in files]
    env = {**os.environ, "CONCH_CACHE_DIR": str(tmp_path / "cold-cache-there")}
    result = subprocess.run([sys.executable, "-m", "conch.cli", "build", *(str(EXAMPLES / f) for f in files),
                             "--out", str(tmp_path / "there")], capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stderr
    for archive in here:
        assert members(archive) == members(tmp_path / "there" / archive.name), archive.name
        assert archive.read_bytes() == (tmp_path / "there" / archive.name).read_bytes(), archive.name


def members(archive: Path) -> dict[str, str]:
    """sha256 of every member of an archive, so a difference names the file that differs."""
    import hashlib
    import tarfile

    with tarfile.open(archive) as tar:
        return {m.name: hashlib.sha256(tar.extractfile(m).read()).hexdigest()  # type: ignore[union-attr]
                for m in tar.getmembers() if m.isfile()}
