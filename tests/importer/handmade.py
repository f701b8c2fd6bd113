"""A model repository written by hand with Triton features conch has no typed setting for: a response
cache, ONNX Runtime's TensorRT accelerator, a sequence batcher, a rate limiter, and a hand-written
model.py (no conch involved in making it)."""

from __future__ import annotations

from pathlib import Path

import onnx_models

MODEL_PY = b'''import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """y = 2 * x, written by hand."""

    def initialize(self, args):
        self.config = json.loads(args["model_config"])

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "x").as_numpy()
            y = pb_utils.Tensor("y", (2 * x).astype(np.float32))
            responses.append(pb_utils.InferenceResponse(output_tensors=[y]))
        return responses
'''

SCALE = """name: "scale"
backend: "python"
max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 4 ] } ]
instance_group [
  {
    kind: KIND_CPU
    count: 1
    rate_limiter { resources [ { name: "R1" count: 1 } ] priority: 1 }
  }
]
sequence_batching {
  max_sequence_idle_microseconds: 5000000
  direct { }
}
"""

AFFINE = """name: "affine"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 4 ] } ]
optimization { execution_accelerators {
  gpu_execution_accelerator : [ {
    name : "tensorrt"
    parameters { key: "precision_mode" value: "FP16" }
    parameters { key: "max_workspace_size_bytes" value: "1073741824" }
  } ]
} }
response_cache { enable: true }
"""

ENSEMBLE = """name: "shop"
platform: "ensemble"
max_batch_size: 8
input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]
ensemble_scheduling {
  step [
    { model_name: "scale" model_version: -1
      input_map { key: "x" value: "X" }
      output_map { key: "y" value: "doubled" } },
    { model_name: "affine" model_version: -1
      input_map { key: "x" value: "doubled" }
      output_map { key: "y" value: "Y" } }
  ]
}
response_cache { enable: true }
"""


def write(root: Path) -> Path:
    """The repository under ``root``."""
    for folder in ("scale/1", "affine/1", "shop/1"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    (root / "scale/1/model.py").write_bytes(MODEL_PY)
    (root / "scale/config.pbtxt").write_text(SCALE)
    onnx_models.affine(root / "affine/1/model.onnx")
    (root / "affine/config.pbtxt").write_text(AFFINE)
    (root / "shop/config.pbtxt").write_text(ENSEMBLE)
    return root
