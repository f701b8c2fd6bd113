"""Seed 002's first ensemble: encoded JPEG bytes -> DALI (decode on the GPU, resize to 299x299, normalise)
-> TensorFlow GraphDef classifier (Inception v3's tensor names, a small graph built here) -> class
probabilities [1001], with a label file for Triton's classification extension."""

from _images import (
    CLASSES,
    INPUT_NAME,
    OUTPUT_NAME,
    SIZE,
    classifier_graph,
    jpegs,
    labels_file,
    padded_batch,
    preprocess,
    reference_probabilities,
)

from conch import DaliStep, Ensemble, InstanceGroup, Tensor, TensorFlowStep, Tolerance

MAX_BATCH = 256

dali = DaliStep(
    "dali",
    preprocess,  # serialized with device_id=None: the mixed (GPU) decoder needs no GPU at build time
    inputs=[Tensor("DALI_INPUT_0", "UINT8", [-1])],
    outputs=[Tensor("DALI_OUTPUT_0", "FP32", [SIZE, SIZE, 3])],
    max_batch_size=MAX_BATCH,
    num_threads=12,
    pure=True,  # pure: the graph follows from its code alone (docs/declare.md)
)

inception = TensorFlowStep(
    "inception_graphdef",
    classifier_graph,  # built from fixed weights when a build needs the file
    inputs=[Tensor(INPUT_NAME, "FP32", [SIZE, SIZE, 3])],
    outputs=[Tensor(OUTPUT_NAME, "FP32", [CLASSES], labels=labels_file())],
    max_batch_size=MAX_BATCH,
    instance_group=InstanceGroup("KIND_GPU"),
)

image_classifier = Ensemble(
    "image_classifier",
    max_batch_size=MAX_BATCH,
    description="DALI JPEG decode + resize + normalise -> TensorFlow GraphDef classifier (1001 classes)",
)
encoded = image_classifier.input("INPUT", "UINT8", [-1])
pixels = dali(encoded).named("preprocessed_image")  # the seed's name for it (default: "dali.DALI_OUTPUT_0")
image_classifier.output("OUTPUT", inception(pixels), dtype="FP32", dims=[CLASSES])

_THREE = jpegs(3)
_SAME_CLASS_CLOSE_PROBABILITIES = Tolerance(argmax=True, atol=1e-4, rtol=1e-3)
image_classifier.sample(
    "three JPEGs of different sizes, zero-padded into one batch",
    {"INPUT": padded_batch(_THREE)},
    lambda: {"OUTPUT": reference_probabilities(_THREE)},
    _SAME_CLASS_CLOSE_PROBABILITIES,
    pure=True,  # pure: TensorFlow from fixed weights
)
image_classifier.sample(
    "one JPEG",
    {"INPUT": padded_batch(_THREE[1:2])},
    lambda: {"OUTPUT": reference_probabilities(_THREE[1:2])},
    _SAME_CLASS_CLOSE_PROBABILITIES,
    pure=True,  # pure: TensorFlow from fixed weights
)
