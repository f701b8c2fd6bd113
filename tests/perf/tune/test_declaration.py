"""The chosen settings written back into the declaration: the step's call found in the ensemble file or a helper
module it imports, its settings rewritten in its own layout, imports added, and the result still valid Python."""

from __future__ import annotations

import ast
from pathlib import Path

from conch.perf.tune.declaration import patch_declaration
from conch.perf.tune.space import Knobs, StepSpace

HELPER = '''"""Steps shared by two ensembles."""

from conch import PythonStep, Tensor

pool = PythonStep(
    "pool",
    print,
    inputs=[Tensor("x", "FP32", [4])],
    outputs=[Tensor("y", "FP32", [4])],
    max_batch_size=8
)
'''

ENSEMBLE = '''"""An ensemble."""

from helper_steps import pool

from conch import DynamicBatching, Ensemble, InstanceGroup, OnnxStep, Tensor

encoder = OnnxStep(
    "encoder",
    "model.onnx",
    max_batch_size=8,
    # two instances on the GPU
    instance_group=InstanceGroup("KIND_GPU", count=2),
    dynamic_batching=DynamicBatching(preferred_batch_size=(8, 16)),
    parameters={"intra_op_thread_count": "1", "other": "kept"},
)
small = OnnxStep("small", "small.onnx", max_batch_size=8)
demo = Ensemble("demo", max_batch_size=8)
'''


def steps() -> dict[str, StepSpace]:
    return {name: StepSpace("demo.tar.gz", f"demo__{name}", name, kind, 8)
            for name, kind in (("encoder", "onnx"), ("small", "onnx"), ("pool", "python"), ("gone", "python"))}


def test_settings_are_written_into_each_call_in_its_own_layout(tmp_path: Path) -> None:
    (tmp_path / "helper_steps.py").write_text(HELPER)
    source = tmp_path / "demo.py"
    source.write_text(ENSEMBLE)
    s = steps()
    chosen = {s["encoder"]: Knobs(3, False, 0, (), (("intra_op_thread_count", 2),)),
              s["small"]: Knobs(2, True, 500, (), (("intra_op_thread_count", 1),)),
              s["pool"]: Knobs(2, True, 0)}
    patch = patch_declaration(source, list(s.values()), chosen)
    demo, helper = patch.files[source], patch.files[tmp_path / "helper_steps.py"]
    assert 'instance_group=InstanceGroup("KIND_GPU", count=3),' in demo  # the declared kind is kept
    assert "dynamic_batching=None," in demo
    assert 'parameters={"intra_op_thread_count": "2", "other": "kept"},' in demo
    assert "    # two instances on the GPU\n" in demo  # comments stay
    assert ('small = OnnxStep("small", "small.onnx", max_batch_size=8, instance_group=InstanceGroup(count=2), '
            'dynamic_batching=DynamicBatching(max_queue_delay_microseconds=500), '
            'parameters={"intra_op_thread_count": "1"})') in demo
    # one argument per line: the new ones too, and a comma after what was the last
    assert ("    max_batch_size=8,\n    instance_group=InstanceGroup(count=2),\n"
            "    dynamic_batching=DynamicBatching(max_queue_delay_microseconds=0),\n)") in helper
    assert "from conch import DynamicBatching, InstanceGroup, PythonStep, Tensor\n" in helper  # joined, sorted
    for text in (demo, helper):
        ast.parse(text)
    assert patch.missing == ()
    assert "--- a/demo.py\n+++ b/demo.py" in patch.diff and "--- a/helper_steps.py\n+++ b/helper_steps.py" in patch.diff
    source.chmod(0o600)
    patch.write()
    assert source.read_text() == demo and not list(tmp_path.glob(".*"))  # written whole, no temporary left
    assert source.stat().st_mode & 0o777 == 0o600  # the user's file keeps its mode


def test_a_step_no_call_declares_is_reported_and_an_unchanged_one_is_not_rewritten(tmp_path: Path) -> None:
    source = tmp_path / "demo.py"
    source.write_text(ENSEMBLE.replace("from helper_steps import pool\n", ""))
    s = steps()
    same = Knobs(2, True, 0, (8, 16), (("intra_op_thread_count", 1),))
    patch = patch_declaration(source, list(s.values()), {s["gone"]: Knobs(2), s["encoder"]: same})
    assert patch.missing == ("gone",)
    # what already says the chosen value is left as it is; batching is written out with its delay
    assert "-    instance_group" not in patch.diff and "-    parameters" not in patch.diff
    assert "+    dynamic_batching=DynamicBatching(preferred_batch_size=(8, 16), max_queue_delay_microseconds=0)," in \
        patch.diff


def test_a_file_without_a_from_conch_import_gets_one_after_its_imports(tmp_path: Path) -> None:
    source = tmp_path / "plain.py"
    source.write_text('import conch\n\nstep = conch.PythonStep("pool", print, max_batch_size=8)\n')
    (pool,) = (s for s in steps().values() if s.step == "pool")
    patch = patch_declaration(source, [pool], {pool: Knobs(2)})
    assert patch.files[source] == ('import conch\nfrom conch import InstanceGroup\n\n'
                                   'step = conch.PythonStep("pool", print, max_batch_size=8, '
                                   'instance_group=InstanceGroup(count=2))\n')
