"""Seed 001's PyTorch model: a ResNet-style CNN as TorchScript behind the libtorch backend (INPUT__0 ->
OUTPUT__0, max_batch_size 128). The CNN is small and built here; its interface is ResNet-50's."""

from _cnn import CHANNELS, CLASSES, SIZE, export_torchscript, images, reference_logits

from conch import Ensemble, Tensor, Tolerance, TorchScriptStep

MAX_BATCH = 128

resnet = TorchScriptStep(
    "resnet",
    export_torchscript,  # traced from fixed weights when a build needs the file
    inputs=[Tensor("INPUT__0", "FP32", [CHANNELS, SIZE, SIZE])],
    outputs=[Tensor("OUTPUT__0", "FP32", [CLASSES])],
    max_batch_size=MAX_BATCH,
)

resnet_pytorch = Ensemble(
    "resnet_pytorch",
    max_batch_size=MAX_BATCH,
    description="ResNet-style CNN (TorchScript, pytorch_libtorch): RGB 3x224x224 -> 1000 logits",
)
image = resnet_pytorch.input("IMAGE", "FP32", [CHANNELS, SIZE, SIZE])
resnet_pytorch.output("LOGITS", resnet(image), dtype="FP32", dims=[CLASSES])

_TWO, _ONE = images(2, seed=10), images(1, seed=11)
_TOLERANCE = Tolerance(atol=1e-4, rtol=1e-4)
resnet_pytorch.sample("two images", {"IMAGE": _TWO}, lambda: {"LOGITS": reference_logits(_TWO)}, _TOLERANCE,
                      pure=True)
resnet_pytorch.sample("one image", {"IMAGE": _ONE}, lambda: {"LOGITS": reference_logits(_ONE)}, _TOLERANCE,
                      pure=True)
