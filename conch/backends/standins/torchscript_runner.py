"""Runs a TorchScript module with torch on the CPU: the local stand-in of a pytorch_libtorch step.
Copied into the model folder and imported by the generated model.py (so it never imports conch).

standin.json says which declared input goes to which forward() position and which declared output is
which element of forward()'s result, as the libtorch backend would bind them."""

import contextlib
import json
import os


class TorchScriptRunner:
    framework = "torch"  # what it imports: a stub Python without it runs it in conch's (standin_bridge.py)

    def setup(self, context):
        import torch

        with open(context.file("standin.json"), encoding="utf-8") as fh:
            spec = json.load(fh)
        self.torch = torch
        # The parameters Triton's libtorch backend reads, so one declaration means the same here (in production
        # the first model's values hold for the whole server process; here each stand-in is a process of its own).
        parameters = getattr(context, "parameters", {})
        torch.set_num_threads(int(parameters.get("INTRA_OP_THREAD_COUNT") or max(1, min(4, os.cpu_count() or 1))))
        if parameters.get("INTER_OP_THREAD_COUNT"):
            with contextlib.suppress(RuntimeError):  # torch allows it once per process, before parallel work
                torch.set_num_interop_threads(int(parameters["INTER_OP_THREAD_COUNT"]))
        self.module = torch.jit.load(context.file("model.pt"), map_location="cpu").eval()
        self.inputs = spec["inputs"]  # declared input names in forward() order
        self.outputs = spec["outputs"]  # [declared output name, index in forward()'s result]

    def __call__(self, **inputs):
        torch = self.torch
        args = [torch.from_numpy(_writable(inputs[name])) for name in self.inputs]
        with torch.inference_mode():
            result = self.module(*args)
        if isinstance(result, torch.Tensor):
            result = (result,)
        if not isinstance(result, (tuple, list)):
            raise TypeError(
                f"forward() returned {type(result).__name__}; the libtorch backend needs a tensor or a tuple of tensors"
            )
        out = {}
        for name, index in self.outputs:
            if index >= len(result):
                raise ValueError(
                    f"output {name!r} is element {index} of forward()'s result, which has {len(result)} elements"
                )
            out[name] = result[index].detach().cpu().numpy()
        return out


def _writable(array):
    # torch warns on read-only numpy arrays (Triton's input buffers may be); copy those.
    return array if array.flags.writeable else array.copy()
