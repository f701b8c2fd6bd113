"""Runs a serialized DALI pipeline on the CPU: the local stand-in of a dali step. conch rewrote the
pipeline's GPU operators for the CPU at build time; this feeds each request batch to the pipeline's
external sources and returns its outputs in order. Copied into the model folder and imported by the
generated model.py (so it never imports conch)."""

import json
import os

import numpy as np


class DaliRunner:
    framework = "nvidia.dali"  # what it imports: a stub Python without it runs it in conch's (standin_bridge.py)

    def setup(self, context):
        from nvidia.dali import Pipeline

        with open(context.file("standin.json"), encoding="utf-8") as fh:
            spec = json.load(fh)
        self.batch_size = spec["batch_size"]
        self.inputs = spec["inputs"]
        self.outputs = spec["outputs"]
        threads = max(1, min(spec["num_threads"], os.cpu_count() or 1))
        # Synchronous execution: one request batch in, its outputs out, nothing prefetched.
        self.pipeline = Pipeline.deserialize(
            filename=context.file("model.dali"), batch_size=self.batch_size, num_threads=threads,
            device_id=None, exec_pipelined=False, exec_async=False, prefetch_queue_depth=1,
        )
        self.pipeline.build()

    def __call__(self, **inputs):
        rows = len(next(iter(inputs.values())))
        parts = {name: [] for name in self.outputs}
        for start in range(0, rows, self.batch_size):
            for name in self.inputs:
                chunk = inputs[name][start:start + self.batch_size]
                self.pipeline.feed_input(name, [np.ascontiguousarray(sample) for sample in chunk])
            for name, batch in zip(self.outputs, self.pipeline.run()):  # noqa: B905 - stub Python, 3.8 too
                parts[name].append(_dense(name, batch))
        return {name: np.concatenate(chunks) for name, chunks in parts.items()}


def _dense(name, batch):
    """A batch of equally shaped samples as one array (Triton's outputs are dense)."""
    if not batch.is_dense_tensor():
        shapes = sorted({tuple(s) for s in batch.shape()})
        raise ValueError(
            f"DALI output {name!r} has samples of different shapes {shapes[:4]!r}; Triton needs one shape "
            "per batch, so resize or pad in the pipeline"
        )
    return batch.as_array()
