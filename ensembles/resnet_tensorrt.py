"""Seed 001's TensorRT model: the same ResNet-style CNN as a TensorRT plan (input -> output,
max_batch_size 128, a batch-128 warmup). The plan is compiled from the ONNX export on a GPU host; the
ONNX source stays with the step, so the local target runs it under ONNX Runtime. Without a GPU, a
production build of this ensemble fails and says how to proceed."""

from _cnn import CHANNELS, CLASSES, SIZE, export_onnx, images, reference_logits

from conch import Ensemble, Tensor, TensorRTStep, Tolerance, Warmup

MAX_BATCH = 128

resnet = TensorRTStep(
    "resnet",
    export_onnx,  # exported from fixed weights when a build needs the file
    inputs=[Tensor("input", "FP32", [CHANNELS, SIZE, SIZE])],
    outputs=[Tensor("output", "FP32", [CLASSES])],
    max_batch_size=MAX_BATCH,
    warmup=Warmup("bs128 Warmup", batch_size=MAX_BATCH),
)

resnet_tensorrt = Ensemble(
    "resnet_tensorrt",
    max_batch_size=MAX_BATCH,
    description="ResNet-style CNN (TensorRT plan compiled from ONNX): RGB 3x224x224 -> 1000 logits",
)
image = resnet_tensorrt.input("IMAGE", "FP32", [CHANNELS, SIZE, SIZE])
resnet_tensorrt.output("LOGITS", resnet(image), dtype="FP32", dims=[CLASSES])

_TWO, _ONE = images(2, seed=10), images(1, seed=11)
_TOLERANCE = Tolerance(atol=1e-4, rtol=1e-4)
resnet_tensorrt.sample("two images", {"IMAGE": _TWO}, lambda: {"LOGITS": reference_logits(_TWO)}, _TOLERANCE,
                       pure=True)
resnet_tensorrt.sample("one image", {"IMAGE": _ONE}, lambda: {"LOGITS": reference_logits(_ONE)}, _TOLERANCE,
                       pure=True)
