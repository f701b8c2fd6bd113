"""The generated model.py in the real tritonserver: a single request takes the fast path (no
concatenate/split) and answers exactly what the batched path answers; outputs are checked against
their declared dims, not only dtype and batch size."""

from __future__ import annotations

import importlib
import sys
import tarfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import fastpath_steps
import numpy as np
import pytest

from conch import DynamicBatching, Ensemble, PythonStep, Tensor
from conch.builder.repository_build import build_ensemble
from conch.errors import BuildError
from conch.replays.local_replay import stage
from conch.triton.mme import InvokeError, MultiModelClient
from conch.triton.server import LocalTriton

pytestmark = pytest.mark.integration


def load(triton: LocalTriton, ens: Ensemble, tmp_path: Path) -> tuple[MultiModelClient, str]:
    archive = build_ensemble(ens, tmp_path, "local")
    client = MultiModelClient(triton.sagemaker_url, triton.http_url)
    client.load(archive.name, stage(archive, triton), timeout=120)
    return client, archive.name


def test_single_requests_answer_exactly_what_batched_calls_answer(tmp_path: Path, triton: LocalTriton) -> None:
    ens = Ensemble("fastpath", max_batch_size=16)
    step = PythonStep("scale", fastpath_steps.scale_and_count, inputs=[Tensor("x", "FP32", [16])],
                      outputs=[Tensor("y", "FP32", [16]), Tensor("rows", "INT32", [1])], max_batch_size=16,
                      dynamic_batching=DynamicBatching(max_queue_delay_microseconds=200_000))
    y, rows = step(ens.input("X", "FP32", [16]))
    ens.output("Y", y)
    ens.output("ROWS", rows)
    client, name = load(triton, ens, tmp_path)
    rng = np.random.default_rng(7)
    payloads = [rng.standard_normal((1 + i % 3, 16)).astype(np.float32) for i in range(24)]

    singles = [client.invoke_binary(name, {"X": p}) for p in payloads]  # one at a time: never batched
    assert all(int(s["ROWS"].max()) == len(p) for s, p in zip(singles, payloads, strict=True))
    with ThreadPoolExecutor(len(payloads)) as pool:  # all at once: Triton merges them within 0.2 s
        together = list(pool.map(lambda p: client.invoke_binary(name, {"X": p}), payloads))

    assert any(int(t["ROWS"].max()) > len(p) for t, p in zip(together, payloads, strict=True)), (
        "no request went through the batched path"
    )
    for single, batched, payload in zip(singles, together, payloads, strict=True):
        assert single["Y"].shape == batched["Y"].shape == payload.shape
        assert single["Y"].tobytes() == batched["Y"].tobytes()


@pytest.mark.parametrize(("code", "dims"), [(fastpath_steps.flat_sum, [1]), (fastpath_steps.wrong_width, [2])])
def test_an_output_of_other_dims_than_declared_names_step_and_output(
    code: object, dims: list[int], tmp_path: Path, triton: LocalTriton
) -> None:
    ens = Ensemble(f"dims_{code.__name__}", max_batch_size=4)  # type: ignore[attr-defined]
    step = PythonStep("summed", code, inputs=[Tensor("x", "FP32", [2])], outputs=[Tensor("total", "FP32", dims)],  # type: ignore[arg-type]
                      max_batch_size=4)
    ens.output("TOTAL", step(ens.input("X", "FP32", [2])))
    client, name = load(triton, ens, tmp_path)
    with pytest.raises(InvokeError) as caught:
        client.invoke_binary(name, {"X": np.ones((3, 2), np.float32)})
    message = str(caught.value)
    assert f"step 'summed' of ensemble '{ens.name}'" in message
    assert "output 'total'" in message and f"declared with dims {dims}" in message


HELPER_STEPS = '''import numpy as np
import scale_helper


def scaled(x):
    from textops import shout  # at function level: a package beside the module
    return (scale_helper.scale(x) + shout.offset()).astype(np.float32)
'''


def helper_module(tmp_path: Path, steps: str = HELPER_STEPS, extra: dict[str, str] | None = None) -> object:
    """A steps module (helper_steps.py) with the user's own modules beside it, imported as a user's would be."""
    code = tmp_path / "code"
    files = {"helper_steps.py": steps, "scale_helper.py": "from scale_deep import FACTOR\n\ndef scale(x):\n"
             "    return x * FACTOR\n", "scale_deep.py": "FACTOR = 3\n", "textops/__init__.py": "",
             "textops/shout.py": "from . import base\n\ndef offset():\n    return base.ONE\n",
             "textops/base.py": "ONE = 1\n", "unused_helper.py": "raise RuntimeError('never imported')\n",
             **(extra or {})}
    for name, text in files.items():
        (code / name).parent.mkdir(parents=True, exist_ok=True)
        (code / name).write_text(text)
    sys.path.insert(0, str(code))
    try:
        return importlib.import_module("helper_steps")
    finally:
        sys.path.remove(str(code))
        for name in ("helper_steps", "scale_helper", "scale_deep", "textops", "textops.shout", "textops.base"):
            sys.modules.pop(name, None)


def test_a_steps_module_importing_helpers_beside_it_builds_an_archive_that_loads(
        tmp_path: Path, triton: LocalTriton) -> None:
    module = helper_module(tmp_path)
    ens = Ensemble("helpers", max_batch_size=4)
    step = PythonStep("scaled", module.scaled, [Tensor("x", "FP32", [2])],  # type: ignore[attr-defined]
                      [Tensor("y", "FP32", [2])], max_batch_size=4)
    ens.output("Y", step(ens.input("X", "FP32", [2])))
    archive = build_ensemble(ens, tmp_path / "built", "production")
    with tarfile.open(archive) as tar:
        shipped = sorted(n for n in tar.getnames() if n.startswith("helpers__scaled/1/") and n.endswith(".py"))
    assert [n.removeprefix("helpers__scaled/1/") for n in shipped] == [
        "helper_steps.py", "model.py", "scale_deep.py", "scale_helper.py", "textops/__init__.py", "textops/base.py",
        "textops/shout.py"]
    client, name = load(triton, ens, tmp_path)
    try:
        answer = client.invoke_binary(name, {"X": np.ones((2, 2), np.float32)})
        np.testing.assert_array_equal(answer["Y"], np.full((2, 2), 4, np.float32))
    finally:
        client.unload(name)


def test_a_helper_module_named_like_a_file_of_the_model_folder_is_refused(tmp_path: Path) -> None:
    steps = "import numpy as np\nimport model\n\n\ndef passthrough(x):\n    return model.same(x)\n"
    module = helper_module(tmp_path, steps, {"model.py": "def same(x):\n    return x\n"})
    ens = Ensemble("reserved", max_batch_size=4)
    step = PythonStep("same", module.passthrough, [Tensor("x", "FP32", [2])],  # type: ignore[attr-defined]
                      [Tensor("y", "FP32", [2])], max_batch_size=4)
    ens.output("Y", step(ens.input("X", "FP32", [2])))
    with pytest.raises(BuildError, match=r"python step 'same': helper_steps.py imports model, a module of yours beside "
                       r"it whose name the model folder uses \(model.py, the Python backend's own "
                       r"triton_python_backend_utils, the step's files/\); rename that module"):
        build_ensemble(ens, tmp_path / "built", "production")
