"""CPU per request of the generated model.py's execute() vs the hand-written per-request loop, in one
process with triton_python_backend_utils replaced by plain classes: the Python each adds around the
step's own work, without the server, the stub's IPC or the machine's load (thread CPU time).

    python benchmarks/model_py_overhead.py [--requests 100000] [--rounds 7]

Writes benchmarks/results/model_py_overhead.json.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

import numpy as np
from _common import ROOT, alternate, median, table, write_json
from python_step import HAND_DOUBLE, declare


def fake_pb_utils() -> types.ModuleType:
    """Just enough of triton_python_backend_utils for execute(): requests are dicts of arrays."""
    module = types.ModuleType("triton_python_backend_utils")

    class Tensor:
        __slots__ = ("array", "name")

        def __init__(self, name: str, array: Any) -> None:
            self.name, self.array = name, array

        def as_numpy(self) -> Any:
            return self.array

    class InferenceResponse:
        def __init__(self, output_tensors: Any = None, error: Any = None) -> None:
            self.output_tensors, self.error = output_tensors, error

    module.Tensor = Tensor  # type: ignore[attr-defined]
    module.InferenceResponse = InferenceResponse  # type: ignore[attr-defined]
    module.TritonError = str  # type: ignore[attr-defined]
    module.get_input_tensor_by_name = lambda request, name: request.get(name)  # type: ignore[attr-defined]
    return module


def load(path: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.TritonPythonModel()


def per_request_us(model: Any, requests: list[Any], count: int) -> float:
    start = time.thread_time()
    for _ in range(count):
        model.execute(requests)
    return (time.thread_time() - start) / count / len(requests) * 1e6


def main() -> int:
    from conch.builder.repository_build import render_repository, write_repository

    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    pb_utils = fake_pb_utils()
    sys.modules["triton_python_backend_utils"] = pb_utils
    x = np.arange(16, dtype=np.float32).reshape(1, 16)
    rows, records = [], []
    with tempfile.TemporaryDirectory(prefix="conch-bench-") as tmp:
        folder = write_repository(render_repository(declare("double", "ovh", False), "local", "24.10"), Path(tmp))
        version = folder / "ovh__step" / "1"
        (version / "hand_model.py").write_text(HAND_DOUBLE)
        generated = load(version / "model.py", "generated_model")
        generated.initialize({"model_name": "ovh__step"})
        hand = load(version / "hand_model.py", "hand_model")
        for batch in (1, 8):
            requests = [{"x": pb_utils.Tensor("x", x)} for _ in range(batch)]  # type: ignore[attr-defined]
            count = max(1, args.requests // batch)
            samples = alternate({"generated": lambda r=requests, c=count: per_request_us(generated, r, c),
                                 "hand-written": lambda r=requests, c=count: per_request_us(hand, r, c)},
                                args.rounds)
            gen, hnd = median(samples["generated"]), median(samples["hand-written"])
            rows.append([batch, round(gen, 2), round(hnd, 2), round(hnd / gen, 2)])
            records.append({"requests_per_execute": batch, "samples_us": samples, "hand_over_generated": hnd / gen})
    print(table(["requests per execute()", "generated us/req", "hand-written us/req", "hand/generated"], rows))
    path = write_json("model_py_overhead", {"rows": records})
    print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
