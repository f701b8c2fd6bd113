"""A GPU-less stand-in runs its framework where the framework is. A local server's Python-backend stub runs
the release's image Python, which holds numpy and no ONNX Runtime, torch, TensorFlow or DALI; conch's own
Python holds them. So the stand-in's runner runs in this process when its framework imports here (``conch run``),
and otherwise in conch's Python (``CONCH_HOST_PYTHON``, set by the local server), as a child process the stub
talks to over a pipe: each call's arrays go as one ``.npz`` frame each way. Copied into the model folder with
the runner's module (under ``files/standin/``) and imported by the generated model.py, so it never imports
conch, and runs on every stub Python from 3.8."""

import importlib
import importlib.util
import io
import json
import os
import pickle
import struct
import subprocess
import sys

import numpy as np

HOST_PYTHON_ENV = "CONCH_HOST_PYTHON"
_LENGTH = struct.Struct("<Q")
_OK, _FAILED = b"0", b"1"


def _has(module):
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _runner_class(folder, module, name):
    if folder not in sys.path:
        sys.path.insert(0, folder)
    return getattr(importlib.import_module(module), name)


def _write(stream, tag, payload):
    stream.write(tag + _LENGTH.pack(len(payload)) + payload)
    stream.flush()


def _read(stream):
    head = stream.read(1 + _LENGTH.size)
    if len(head) < 1 + _LENGTH.size:
        return None, b""
    (size,) = _LENGTH.unpack(head[1:])
    return head[:1], stream.read(size)


def _pack(arrays):
    """Arrays as bytes both numpy 1 (the stub's) and numpy 2 (conch's) read: ``.npz`` for numbers, and BYTES
    tensors (object arrays, whose pickles name numpy's private modules) as plain lists."""
    arrays = {name: np.asarray(value) for name, value in arrays.items()}
    objects = {n: (a.shape, a.ravel().tolist()) for n, a in arrays.items() if a.dtype.kind == "O"}
    buf = io.BytesIO()
    np.savez(buf, **{n: a for n, a in arrays.items() if n not in objects})
    return pickle.dumps((buf.getvalue(), objects), protocol=4)


def _unpack(payload):
    numbers, objects = pickle.loads(payload)
    with np.load(io.BytesIO(numbers), allow_pickle=False) as data:
        arrays = {name: data[name] for name in data.files}
    for name, (shape, values) in objects.items():
        flat = np.empty(len(values), dtype=object)
        flat[:] = values
        arrays[name] = flat.reshape(shape)
    return arrays


class StandIn:
    """The stand-in's code: ``files/standin/runner.json`` names its runner (module, class) and the framework."""

    def setup(self, context):
        with open(context.file("standin/runner.json"), encoding="utf-8") as fh:
            spec = json.load(fh)
        folder = os.path.dirname(context.file("standin/runner.json"))
        self._child = None
        host = os.environ.get(HOST_PYTHON_ENV)
        if _has(spec["framework"]) or not host:
            self._runner = _runner_class(folder, spec["module"], spec["class"])()
            self._runner.setup(context)
            return
        self._runner = None
        self._child = subprocess.Popen([host, os.path.abspath(__file__)], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE)
        hello = {"folder": folder, "module": spec["module"], "class": spec["class"],
                 "files_dir": context.files_dir, "version_dir": context.version_dir,
                 "model_name": context.model_name, "instance_name": context.instance_name,
                 "parameters": context.parameters}
        _write(self._child.stdin, _OK, json.dumps(hello).encode())
        self._answer()

    def _answer(self):
        tag, payload = _read(self._child.stdout)
        if tag is None:
            raise RuntimeError(f"the stand-in's runner in conch's Python ({os.environ.get(HOST_PYTHON_ENV)}) exited: "
                               "see the server log")
        if tag == _FAILED:
            raise RuntimeError(payload.decode("utf-8", "replace"))
        return payload

    def __call__(self, **inputs):
        if self._child is None:
            return self._runner(**inputs)
        _write(self._child.stdin, _OK, _pack(inputs))
        return _unpack(self._answer())

    def teardown(self):
        child, self._child = self._child, None
        if child is not None:
            child.stdin.close()
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()
        elif self._runner is not None and hasattr(self._runner, "teardown"):
            self._runner.teardown()


class _Context:
    """What the runner's setup() reads of the stub's StepContext, rebuilt in the child."""

    def __init__(self, hello):
        self.model_name = hello["model_name"]
        self.instance_name = hello["instance_name"]
        self.version_dir = hello["version_dir"]
        self.files_dir = hello["files_dir"]
        self.parameters = hello["parameters"]

    def file(self, name):
        path = os.path.join(self.files_dir, name)
        if not os.path.exists(path):
            raise FileNotFoundError(f"no file {name!r} among the stand-in's files")
        return path


def _serve():
    """The child: the runner in conch's Python, one frame in and one out per call, until its input closes."""
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # what the runner prints goes to the server log, not into the frames
    stdin = sys.stdin.buffer
    tag, payload = _read(stdin)
    try:
        hello = json.loads(payload.decode())
        runner = _runner_class(hello["folder"], hello["module"], hello["class"])()
        runner.setup(_Context(hello))
    except Exception as exc:
        _write(out, _FAILED, f"{type(exc).__name__}: {exc}".encode())
        return
    _write(out, _OK, b"")
    while True:
        tag, payload = _read(stdin)
        if tag is None:
            break
        try:
            result = runner(**_unpack(payload))
            _write(out, _OK, _pack(dict(result)))
        except Exception as exc:
            _write(out, _FAILED, f"{type(exc).__name__}: {exc}".encode())
    if hasattr(runner, "teardown"):
        runner.teardown()


if __name__ == "__main__":
    _serve()
