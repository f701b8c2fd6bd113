"""Runs an ONNX model with ONNX Runtime on the CPU: the local stand-in of an onnxruntime_onnx or
TensorRT step. Copied into the model folder and imported by the generated model.py."""

import os


class OnnxRuntimeRunner:
    framework = "onnxruntime"  # what it imports: a stub Python without it runs it in conch's (standin_bridge.py)

    def setup(self, context):
        import onnxruntime

        options = onnxruntime.SessionOptions()
        # The parameters Triton's onnxruntime backend reads, so one declaration means the same here.
        parameters = getattr(context, "parameters", {})
        default_threads = max(1, min(4, os.cpu_count() or 1))
        options.intra_op_num_threads = int(parameters.get("intra_op_thread_count") or default_threads)
        if parameters.get("inter_op_thread_count"):
            options.inter_op_num_threads = int(parameters["inter_op_thread_count"])
        self.session = onnxruntime.InferenceSession(
            context.file("model.onnx"), options, providers=["CPUExecutionProvider"]
        )
        self.output_names = [o.name for o in self.session.get_outputs()]

    def __call__(self, **inputs):
        results = self.session.run(self.output_names, inputs)
        return dict(zip(self.output_names, results))  # noqa: B905 - runs on the stub Python, 3.8 too
