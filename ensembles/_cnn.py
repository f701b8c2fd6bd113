"""Build-time helpers for the ResNet examples (run by conch, never inside Triton): a small residual CNN
with ResNet-50's interface (RGB 3x224x224 -> 1000 logits) and fixed weights, exported as TorchScript and
as ONNX, and reference logits computed by running it directly with torch."""

from __future__ import annotations

import importlib.metadata
import sys
from functools import cache
from pathlib import Path

import numpy as np

from conch.cache import cached_file, code_digest, key_of

CHANNELS, SIZE, CLASSES = 3, 224, 1000
_RECIPE = "tiny-resnet-v2"  # bump when the architecture or weights change


@cache
def model():  # type: ignore[no-untyped-def]
    """Strided stem, one residual block, global average pool, linear head; weights from a fixed seed."""
    import torch

    class TinyResNet(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = torch.nn.Conv2d(CHANNELS, 16, 7, stride=4, padding=3)
            self.conv1 = torch.nn.Conv2d(16, 16, 3, padding=1)
            self.conv2 = torch.nn.Conv2d(16, 16, 3, padding=1)
            self.head = torch.nn.Linear(16, CLASSES)

        def forward(self, image):  # type: ignore[no-untyped-def]
            x = torch.relu(self.stem(image))
            x = torch.relu(x + self.conv2(torch.relu(self.conv1(x))))
            return self.head(x.mean(dim=(2, 3)))

    net = TinyResNet().eval()
    rng = np.random.default_rng(1)
    with torch.no_grad():
        for param in net.parameters():
            fan_in = int(np.prod(param.shape[1:])) if param.dim() > 1 else 16
            values = rng.standard_normal(tuple(param.shape)) / np.sqrt(fan_in)
            param.copy_(torch.from_numpy(values.astype(np.float32)))
    return net


def _key(kind: str) -> str:
    # torch's version from its installed metadata (an unchanged rebuild need not import torch for a key), the
    # Python, and this file's code (and the files beside it that it imports): an edited export is made again
    material = [_RECIPE, kind, importlib.metadata.version("torch"), sys.version, code_digest(_key)]
    return f"{_RECIPE}-{kind}-{key_of(material)[:16]}"


def _example():  # type: ignore[no-untyped-def]
    import torch

    return torch.zeros(2, CHANNELS, SIZE, SIZE)


def export_torchscript() -> Path:
    """model.pt traced once per torch version, as deterministic bytes (no file name or paths inside)."""

    def produce(path: Path) -> None:
        import torch

        from conch.backends.pytorch import torchscript_bytes

        with torch.no_grad():
            traced = torch.jit.trace(model(), _example(), check_trace=False)
        path.write_bytes(torchscript_bytes(traced))

    return cached_file("artifacts", _key("torchscript"), "model.pt", produce)


def export_onnx() -> Path:
    """model.onnx with input "input", output "output" and a dynamic batch axis (seed 001's names)."""

    def produce(path: Path) -> None:
        import torch

        torch.onnx.export(
            model(), (_example(),), str(path), input_names=["input"], output_names=["output"], opset_version=17,
            dynamo=False, dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}},
        )
        model().eval()  # the exporter restores training mode recursively afterwards

    return cached_file("artifacts", _key("onnx"), "model.onnx", produce)


def images(count: int, seed: int) -> np.ndarray:
    """Normalised-looking random images, float32 [count, 3, 224, 224]."""
    return np.random.default_rng(seed).standard_normal((count, CHANNELS, SIZE, SIZE)).astype(np.float32)


def reference_logits(batch: np.ndarray) -> np.ndarray:
    """The eager model's logits for a batch."""
    import torch

    with torch.no_grad():
        logits: np.ndarray = model()(torch.from_numpy(batch)).numpy()
    return logits
