"""Runs an ONNX model with ONNX Runtime on the CPU: the local stand-in of an onnxruntime_onnx or
TensorRT step. Copied into the model folder and imported by the generated model.py."""

import os


class OnnxRuntimeRunner:
    def setup(self, context):
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = max(1, min(4, os.cpu_count() or 1))
        self.session = onnxruntime.InferenceSession(
            context.file("model.onnx"), options, providers=["CPUExecutionProvider"]
        )
        self.output_names = [o.name for o in self.session.get_outputs()]

    def __call__(self, **inputs):
        results = self.session.run(self.output_names, inputs)
        return dict(zip(self.output_names, results))  # noqa: B905 - runs on the stub Python, 3.8 too
