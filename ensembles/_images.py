"""Build-time helpers for the image example (run by conch, never inside Triton): the DALI preprocessing
pipeline, a small frozen TensorFlow classifier with the seed's tensor names, its label file, generated
JPEGs, and reference probabilities computed by running the pipeline and the graph directly."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import io
import os
import sys
from pathlib import Path

import numpy as np

from conch.cache import cached_file, code_digest, key_of

SIZE = 299
CLASSES = 1001  # 1000 ImageNet classes and "background", as Inception v3's graph has
INPUT_NAME = "input"
OUTPUT_NAME = "InceptionV3/Predictions/Softmax"
MEAN = [0.485 * 255, 0.456 * 255, 0.406 * 255]
STD = [0.229 * 255, 0.224 * 255, 0.225 * 255]
_RECIPE = "image-classifier-v1"  # bump when the graph or the labels change


def preprocess(decoder: str = "mixed"):  # type: ignore[no-untyped-def]
    """Encoded images -> decoded RGB (on the GPU), resized to 299x299, normalised with ImageNet mean/std."""
    import nvidia.dali.fn as fn
    import nvidia.dali.types as types

    images = fn.external_source(name="DALI_INPUT_0", device="cpu", dtype=types.UINT8, ndim=1)
    images = fn.decoders.image(images, device=decoder, output_type=types.RGB)
    images = fn.resize(images, resize_x=SIZE, resize_y=SIZE)
    return fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="HWC", mean=MEAN, std=STD)


def _build_graph() -> bytes:
    """A small frozen classifier: strided conv + max pool + global mean, plus per-channel means, into a
    1001-way softmax. Weights are fixed random numbers; the node names are Inception v3's I/O names."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    v1 = tf.compat.v1
    rng = np.random.default_rng(2024)
    graph = tf.Graph()
    with graph.as_default():
        x = v1.placeholder(tf.float32, [None, SIZE, SIZE, 3], name=INPUT_NAME)
        kernel = tf.constant(rng.standard_normal((5, 5, 3, 16)).astype(np.float32) * 0.2, name="conv/kernel")
        y = tf.nn.relu(tf.nn.conv2d(x, kernel, strides=4, padding="SAME", name="conv/Conv2D"))
        y = tf.nn.max_pool2d(y, 3, 2, "SAME", name="pool/MaxPool")
        features = tf.concat(
            [tf.reduce_mean(y, axis=[1, 2]), tf.reduce_mean(x, axis=[1, 2])], axis=1, name="features"
        )
        weights = tf.constant(rng.standard_normal((19, CLASSES)).astype(np.float32) * 2.0, name="logits/weights")
        bias = tf.constant(rng.standard_normal(CLASSES).astype(np.float32) * 0.1, name="logits/bias")
        logits = tf.nn.bias_add(tf.matmul(features, weights), bias, name="logits/BiasAdd")
        tf.nn.softmax(logits, name=OUTPUT_NAME)
    # deterministic=True: the attr maps are otherwise serialized in a per-process order.
    data: bytes = graph.as_graph_def().SerializeToString(deterministic=True)
    return data


def _key(kind: str) -> str:
    # TensorFlow's version from its installed metadata (the wheel is tensorflow or tensorflow-cpu): an
    # unchanged rebuild need not import TensorFlow for a key
    for wheel in ("tensorflow", "tensorflow-cpu"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            material = [_RECIPE, kind, importlib.metadata.version(wheel), sys.version, code_digest(_key)]
            return f"{_RECIPE}-{kind}-{key_of(material)[:16]}"  # an edited export (this file's code) is made again
    raise ModuleNotFoundError("this example needs TensorFlow: pip install tensorflow-cpu")


def classifier_graph() -> Path:
    """model.graphdef, built once per TensorFlow version."""
    return cached_file("artifacts", _key("graphdef"), "model.graphdef", lambda p: p.write_bytes(_build_graph()))


def labels_file() -> Path:
    """inception_labels.txt: one label per class, "background" first (Inception's 1001-class layout)."""
    text = "\n".join(["background"] + [f"class_{i:04d}" for i in range(1, CLASSES)]) + "\n"
    key = f"{_RECIPE}-labels-{hashlib.sha256(text.encode()).hexdigest()[:12]}"
    return cached_file("artifacts", key, "inception_labels.txt", lambda p: p.write_text(text))


def jpegs(count: int, seed: int = 0) -> list[bytes]:
    """JPEGs of different sizes and dominant colours (so the classifier tells them apart), made with Pillow."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        height, width = 180 + 40 * i, 320 - 30 * i
        base = np.zeros((height, width, 3), dtype=np.float32)
        base[..., i % 3] = 200.0
        base += np.linspace(0, 55, width, dtype=np.float32)[None, :, None]
        noisy = base + rng.normal(0, 12, base.shape)
        buffer = io.BytesIO()
        Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8)).save(buffer, format="JPEG", quality=90)
        out.append(buffer.getvalue())
    return out


def padded_batch(images: list[bytes]) -> np.ndarray:
    """Encoded images as one UINT8 [N, L] tensor: Triton batches are dense, so shorter ones are padded
    with zeros (JPEG decoders stop at the end-of-image marker)."""
    longest = max(len(b) for b in images)
    batch = np.zeros((len(images), longest), dtype=np.uint8)
    for row, data in enumerate(images):
        batch[row, : len(data)] = np.frombuffer(data, dtype=np.uint8)
    return batch


def reference_probabilities(images: list[bytes]) -> np.ndarray:
    """The pipeline run directly with DALI's CPU decoder, then the graph in a TensorFlow session."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import nvidia.dali as dali
    import tensorflow as tf

    pipe = dali.pipeline_def(preprocess)(decoder="cpu", batch_size=len(images), num_threads=1, device_id=None)
    pipe.build()
    pipe.feed_input("DALI_INPUT_0", [np.frombuffer(b, dtype=np.uint8) for b in images])
    (batch,) = pipe.run()
    pixels = batch.as_array()
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.import_graph_def(tf.compat.v1.GraphDef.FromString(classifier_graph().read_bytes()), name="")
    with tf.compat.v1.Session(graph=graph) as session:
        probabilities: np.ndarray = session.run(f"{OUTPUT_NAME}:0", {f"{INPUT_NAME}:0": pixels})
    return probabilities.astype(np.float32)
