"""Backend refusals a user meets: a BYTES tensor on a pytorch step, a DALI pipeline whose samples differ
in shape (found by its CPU stand-in under `conch run`); each triggered for real, its message asserted."""

from __future__ import annotations

import importlib
import io
import re
import sys
from pathlib import Path

import numpy as np
import pytest

import conch
from conch import DaliStep, DeclarationError, Ensemble, PythonStep, RunError, Tensor, TorchScriptStep
from conch.builder.repository_build import build_ensemble
from conch.replays.local_replay import stage
from conch.triton.mme import InvokeError, MultiModelClient
from conch.triton.server import LocalTriton


def test_a_pytorch_step_refuses_bytes_tensors() -> None:
    with pytest.raises(DeclarationError, match=re.escape(
            "pytorch step 's': tensor 'text' is BYTES; conch's pytorch steps take numeric tensors only (tokenize "
            "strings in a Python step before)")):
        TorchScriptStep("s", b"", inputs=[Tensor("text", "BYTES", [1])], outputs=[Tensor("y", "FP32", [4])])


def decode_without_resize():  # type: ignore[no-untyped-def]
    """JPEG bytes -> RGB pixels at each image's own size: the resize a pipeline needs is missing."""
    import nvidia.dali.fn as fn
    import nvidia.dali.types as types

    images = fn.external_source(name="IMAGES", device="cpu", dtype=types.UINT8, ndim=1)
    return fn.decoders.image(images, device="cpu", output_type=types.RGB)


def jpeg(height: int, width: int) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(np.full((height, width, 3), 128, np.uint8)).save(buffer, format="JPEG")
    return buffer.getvalue()


def test_a_dali_pipeline_whose_samples_differ_in_shape_is_named_under_conch_run() -> None:
    step = DaliStep("decode", decode_without_resize, inputs=[Tensor("IMAGES", "UINT8", [-1])],
                    outputs=[Tensor("PIXELS", "UINT8", [-1, -1, 3])], max_batch_size=4)
    ens = Ensemble("pre", max_batch_size=4)
    ens.output("OUT", step(ens.input("IN", "UINT8", [-1])))
    images = [jpeg(20, 30), jpeg(40, 10)]
    batch = np.zeros((2, max(len(b) for b in images)), np.uint8)
    for row, data in enumerate(images):
        batch[row, : len(data)] = np.frombuffer(data, np.uint8)
    with pytest.raises(RunError, match=re.escape(
            "DALI output 'PIXELS' has samples of different shapes [(20, 30, 3), (40, 10, 3)]; Triton needs one "
            "shape per batch, so resize or pad in the pipeline")):
        conch.run(ens, {"IN": batch})


BATCH_STEPS = '''"""Step code for a test: returns one row whatever the batch (a sum over the batch axis)."""

import numpy as np


def summed_over_batch(x):
    return {"y": x.sum(axis=0, keepdims=True).astype(np.float32)}
'''


@pytest.mark.integration
def test_model_py_in_tritonserver_names_an_output_that_lost_the_batch_dimension(
        tmp_path: Path, triton: LocalTriton) -> None:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "msg_batch_steps.py").write_text(BATCH_STEPS)
    sys.path.insert(0, str(tmp_path / "code"))
    try:
        module = importlib.import_module("msg_batch_steps")
    finally:
        sys.path.remove(str(tmp_path / "code"))
        sys.modules.pop("msg_batch_steps", None)
    ens = Ensemble("lost_batch", max_batch_size=4)
    step = PythonStep("summed", module.summed_over_batch, inputs=[Tensor("x", "FP32", [2])],
                      outputs=[Tensor("y", "FP32", [2])],
                      max_batch_size=4)
    ens.output("Y", step(ens.input("X", "FP32", [2])))
    archive = build_ensemble(ens, tmp_path / "built", "local")
    client = MultiModelClient(triton.sagemaker_url, triton.http_url)
    client.load(archive.name, stage(archive, triton), timeout=120)
    try:
        with pytest.raises(InvokeError, match=re.escape(
                "step 'summed' of ensemble 'lost_batch': output 'y' has shape [1, 2], but the batch has 3 rows; "
                "outputs keep the batch dimension first")):
            client.invoke_binary(archive.name, {"X": np.ones((3, 2), np.float32)})
    finally:
        client.unload(archive.name)
