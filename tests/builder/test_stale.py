"""A rebuild with a warm cache ships what the code says now: one test per way an answer can depend on
something outside the code conch can read (a file the code reads, an environment variable, an installed
library's version, a helper module outside the ensemble's folder, a closure's captured value). Each builds four
ensembles, one per kind of user code (a DALI pipeline, a sample's expected outputs, a Python step run by the
build to derive a warmup (by the environment variable only: it runs on the image's Python), an exported ONNX
model), each multiplying by a value found that way and
nothing else changing with it (so no change of one part masks a stale other). It changes the value, builds
again with the same cache, and holds every archive to the one a build with an empty cache writes. Every build
is a `conch build` process of its own, as a user runs it (a library upgraded or a helper edited is only seen
by a new process)."""

from __future__ import annotations

import base64
import hashlib
import io
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

import conch

CONCH_ROOT = str(Path(conch.__file__).resolve().parents[1])

CODE = '''
"""Everything multiplies by current(), found the way the test names."""
import os
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent

{current}


def scale(x):  # the Python step (a top-level function: Triton imports it)
    return {{"y": x * np.float32({python_value})}}


def same(x):  # a step after it, whose warmup input is what scale returned
    return {{"y": x}}


def make(value):
    """The DALI pipeline, the exported model and the sample's reference function."""

    def pipeline():
        import nvidia.dali.fn as fn
        import nvidia.dali.types as types

        x = fn.external_source(name="DALI_INPUT_0", device="cpu", dtype=types.FLOAT, ndim=1)
        return x * {value}

    def exported():
        import onnx
        from onnx import TensorProto, helper, numpy_helper

        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])
        factor = numpy_helper.from_array(np.array({value}, dtype=np.float32), "factor")
        graph = helper.make_graph([helper.make_node("Mul", ["x", "factor"], ["y"])], "mul", [x], [y], [factor])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="tests")
        model.ir_version = 8
        onnx.save(model, str(HERE / "mul.onnx"))  # the same file each build, rewritten in place
        return HERE / "mul.onnx"

    def expected():
        return {{"OUT": np.ones((2, 4), np.float32) * np.float32({value})}}

    return pipeline, exported, expected
'''

ENSEMBLE = '''
import numpy as np

import stale_code as code
from conch import DaliStep, Ensemble, OnnxStep, PythonStep, Tensor

pipeline, exported, expected = code.make({closure})
ONES = {{"IN": np.ones((2, 4), np.float32)}}


def ensemble(name):
    ens = Ensemble(name, max_batch_size=4)
    return ens, ens.input("IN", "FP32", [4])


def python(name, fn):
    return PythonStep(name, fn, inputs=[Tensor("x", "FP32", [4])], outputs=[Tensor("y", "FP32", [4])],
                      max_batch_size=4)


stale_dali, x = ensemble("stale_dali")
stale_dali.output("OUT", DaliStep("dali", pipeline, inputs=[Tensor("DALI_INPUT_0", "FP32", [4])],
                                  outputs=[Tensor("DALI_OUTPUT_0", "FP32", [4])], max_batch_size=4)(x))

stale_sample, x = ensemble("stale_sample")
stale_sample.output("OUT", python("same", code.same)(x))
stale_sample.sample("one", ONES, expected)

stale_python, x = ensemble("stale_python")
stale_python.output("OUT", python("same", code.same)(python("scale", code.scale)(x)))
stale_python.sample("one", ONES, {{"OUT": np.ones((2, 4), np.float32)}})
stale_python.warmup("one")  # derived by running the ensemble in the build

stale_export, x = ensemble("stale_export")
stale_export.output("OUT", OnnxStep("mul", exported, inputs=[Tensor("x", "FP32", [4])],
                                    outputs=[Tensor("y", "FP32", [4])], max_batch_size=4)(x))
'''
NAMES = ("stale_dali", "stale_sample", "stale_python", "stale_export")

# how current() finds the value, per way; {value} in the code is `current()`, except for the closure
CURRENT = {
    "file": 'def current():\n    return float((HERE / "value.txt").read_text())',
    "environment variable": 'def current():\n    return float(os.environ["STALE_VALUE"])',
    "library version": "def current():\n    import stalelib\n\n    return float(stalelib.VALUE)",
    "helper module outside the folder": "def current():\n    import stalehelper\n\n    return float(stalehelper.VALUE)",
    "closure value": "",
}


def _wheel(folder: Path, version: str, value: float) -> Path:
    """A pure-Python wheel of the distribution ``stalelib`` at ``version``, whose VALUE is ``value``."""
    files = {
        "stalelib.py": f"VALUE = {value}\n".encode(),
        f"stalelib-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: stalelib\nVersion: {version}\n"
                                                  .encode(),
        f"stalelib-{version}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\n"
                                               b"Tag: py3-none-any\n",
    }
    record = "".join(
        f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}\n"
        for name, data in files.items()) + f"stalelib-{version}.dist-info/RECORD,,\n"
    path = folder / f"stalelib-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in {**files, f"stalelib-{version}.dist-info/RECORD": record.encode()}.items():
            zf.writestr(name, data)
    return path


class Project:
    """The ensemble's folder, a helper folder outside it, a --target folder for the library, and one cache."""

    def __init__(self, root: Path, way: str) -> None:
        self.root, self.way = root, way
        self.folder, self.outside, self.lib = root / "project", root / "outside", root / "lib"
        for folder in (self.folder, self.outside, self.lib):
            folder.mkdir()
        current = CURRENT[way]
        value = "value" if way == "closure value" else "current()"
        # the Python step runs in the build as the image's stub runs it (docs/image-python.md): only the environment
        # variable reaches it there, as on Triton; a file beside the module, a library of conch's venv and a helper
        # outside the folder would fail its warmup, as they fail on SageMaker. A closure Triton never sees either.
        python_value = "current()" if way == "environment variable" else "1.0"
        (self.folder / "stale_code.py").write_text(CODE.format(current=current, value=value,
                                                               python_value=python_value))
        self.env = {**os.environ, "PYTHONPATH": os.pathsep.join([CONCH_ROOT, str(self.lib), str(self.outside)]),
                    "CONCH_CACHE_DIR": str(root / "cache")}

    def set(self, value: float) -> None:
        """Make ``value`` the one the code finds, the way the test names."""
        if self.way == "file":
            (self.folder / "value.txt").write_text(str(value))
        elif self.way == "environment variable":
            self.env["STALE_VALUE"] = str(value)
        elif self.way == "library version":
            wheel = _wheel(self.root, f"{int(value)}.0", value)
            subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--upgrade",
                            "--target", str(self.lib), str(wheel)], check=True, capture_output=True, timeout=300)
        elif self.way == "helper module outside the folder":
            (self.outside / "stalehelper.py").write_text(f"VALUE = {value}\n")
        (self.folder / "stale_ens.py").write_text(ENSEMBLE.format(closure=value if self.way == "closure value"
                                                                  else "None"))

    def build(self, out: str, cache: str = "cache") -> dict[str, bytes]:
        """`conch build` of the ensembles into ``out`` with cache folder ``cache``: each archive's bytes."""
        env = {**self.env, "CONCH_CACHE_DIR": str(self.root / cache)}
        result = subprocess.run([sys.executable, "-m", "conch", "build", "stale_ens.py", "--target", "local",
                                 "--out", str(self.root / out), "-j", "1"], cwd=self.folder, env=env,
                                capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stdout + result.stderr
        return {name: (self.root / out / f"{name}.tar.gz").read_bytes() for name in NAMES}


def _members(archive: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar if m.isreg()}  # type: ignore[union-attr]


@pytest.mark.parametrize("way", list(CURRENT))
def test_a_rebuild_with_a_warm_cache_ships_what_the_code_says_now(tmp_path: Path, way: str) -> None:
    project = Project(tmp_path, way)
    project.set(2.0)
    first = project.build("first")
    project.set(3.0)
    again = project.build("again")  # the same cache, warm from the first build
    cold = project.build("cold", cache="empty-cache")
    moved = {name for name in NAMES if cold[name] != first[name]}
    # the Python step's warmup follows the value by the environment variable only (see Project)
    assert moved == set(NAMES) - ({"stale_python"} if way != "environment variable" else set())
    stale = {name: sorted(member for member, data in _members(cold[name]).items()
                          if _members(again[name]).get(member) != data) for name in NAMES if again[name] != cold[name]}
    assert stale == {}, f"after the {way} changed, the rebuild kept what the old value gave: {stale}"
