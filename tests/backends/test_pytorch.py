"""PyTorch (libtorch) steps: how declared names bind to forward(), the build-time probe, deterministic
model.pt bytes, and the torch stand-in binding inputs the way Triton does."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch_modules

from conch import BuildError, DeclarationError, Ensemble, Release, Tensor, TorchScriptStep
from conch.backends.pytorch import bind_inputs, bind_outputs, named_index, torchscript_bytes
from conch.builder.repository_build import build_ensemble, render_repository
from conch.replays.local_replay import replay_archives

RELEASE = Release.of("24.10")


def difference_step(inputs: list[str], outputs: tuple[str, str] = ("OUTPUT__0", "OUTPUT__1")) -> TorchScriptStep:
    return TorchScriptStep(
        "difference", torch_modules.difference(), inputs=[Tensor(n, "FP32", [3]) for n in inputs],
        outputs=[Tensor(n, "FP32", [3]) for n in outputs], max_batch_size=4,
    )


def test_named_index_reads_digits_after_the_first_double_underscore() -> None:
    assert named_index("INPUT__0") == 0 and named_index("OUTPUT__12") == 12
    assert named_index("INPUT") is None and named_index("INPUT__") is None
    assert named_index("my__input__0") is None  # Triton splits at the first "__"


def test_inputs_bind_by_forward_argument_names_in_argument_order() -> None:
    step = difference_step(["b", "a"])
    step.check(RELEASE)
    assert step.binding().inputs == ("a", "b")


def test_inputs_bind_by_index_convention() -> None:
    assert bind_inputs("s", ["INPUT__1", "INPUT__0"], ["a", "b"]) == ("INPUT__0", "INPUT__1")


def test_a_misspelt_argument_name_fails_instead_of_binding_by_config_order() -> None:
    with pytest.raises(BuildError, match=r"input 'alpha' is not an argument of forward\(\) in model.pt \(its "
                                         r"arguments are 'a', 'b'\)"):
        difference_step(["alpha", "b"]).check(RELEASE)


def test_input_count_must_match_forward() -> None:
    with pytest.raises(BuildError, match=r"forward\(\) takes 2 tensors \('a', 'b'\), but the step declares 1"):
        bind_inputs("s", ["a"], ["a", "b"])


def test_index_beyond_forward_arguments_fails() -> None:
    with pytest.raises(BuildError, match=r"input 'INPUT__2' names forward\(\) argument 2, but forward\(\) takes 2"):
        bind_inputs("s", ["INPUT__0", "INPUT__2"], ["a", "b"])


def test_outputs_bind_by_index_convention_else_by_declaration_order() -> None:
    assert bind_outputs(["OUTPUT__1", "OUTPUT__0"]) == (("OUTPUT__1", 1), ("OUTPUT__0", 0))
    assert bind_outputs(["difference", "total"]) == (("difference", 0), ("total", 1))


def test_probe_reports_a_missing_output_element() -> None:
    step = TorchScriptStep("affine", torch_modules.affine(), inputs=[Tensor("x", "FP32", [4])],
                           outputs=[Tensor("OUTPUT__0", "FP32", [4]), Tensor("OUTPUT__1", "FP32", [4])],
                           max_batch_size=4)
    with pytest.raises(BuildError, match=r"output 'OUTPUT__1' is element 1 of forward\(\)'s result, which has 1"):
        step.check(RELEASE)


def test_probe_false_skips_the_run_on_zeros() -> None:
    step = TorchScriptStep("affine", torch_modules.affine(), inputs=[Tensor("x", "INT64", [4])],
                           outputs=[Tensor("OUTPUT__0", "FP32", [4])], max_batch_size=4, probe=False)
    step.check(RELEASE)  # dtypes are not checked without the probe (INT64 into a Linear layer would fail) ...
    assert step.binding().inputs == ("x",)  # ... but names still bind


def test_eager_modules_and_bytes_tensors_are_refused() -> None:
    eager = torch.nn.Linear(4, 4)
    with pytest.raises(DeclarationError, match=r"needs TorchScript, but got the eager module Linear; convert it"):
        TorchScriptStep("eager", eager, inputs=[Tensor("x", "FP32", [4])],
                        outputs=[Tensor("y", "FP32", [4])]).artifact.resolve()
    with pytest.raises(DeclarationError, match=r"tensor 'text' is BYTES"):
        TorchScriptStep("s", b"", inputs=[Tensor("text", "BYTES", [1])], outputs=[Tensor("y", "FP32", [4])])


def _trace_here(module):  # type: ignore[no-untyped-def]
    return torch.jit.trace(module, torch.zeros(2, 4))


def _trace_elsewhere(module):  # type: ignore[no-untyped-def]
    traced = torch.jit.trace(module, torch.zeros(2, 4))
    return traced


def test_torchscript_bytes_are_deterministic_and_carry_no_paths() -> None:
    module = torch_modules.affine()
    first, second = torchscript_bytes(_trace_here(module)), torchscript_bytes(_trace_elsewhere(module))
    assert first == second  # traced from different call stacks
    names = zipfile.ZipFile(io.BytesIO(first)).namelist()
    assert all(n.startswith("archive/") for n in names)
    assert not any(n.endswith(".debug_pkl") for n in names)
    assert str(Path(__file__).parent).encode() not in first
    loaded = torch.jit.load(io.BytesIO(first))
    x = torch.arange(8, dtype=torch.float32).reshape(2, 4)
    assert torch.equal(loaded(x), module(x))


def test_standin_carries_the_binding() -> None:
    ens = Ensemble("bind", max_batch_size=4)
    a, b = ens.input("A", "FP32", [3]), ens.input("B", "FP32", [3])
    diff, total = difference_step(["b", "a"])(b=b, a=a)
    ens.output("DIFF", diff)
    ens.output("TOTAL", total)
    repo = render_repository(ens, "local", RELEASE)
    spec = json.loads(repo.files["bind__difference/1/files/standin.json"])  # type: ignore[arg-type]
    assert spec == {"inputs": ["a", "b"], "outputs": [["OUTPUT__0", 0], ["OUTPUT__1", 1]]}
    assert "bind__difference/1/files/standin/torchscript_runner.py" in repo.files


@pytest.mark.integration
def test_argument_names_reach_the_right_forward_positions_in_tritonserver(tmp_path: Path, triton) -> None:  # type: ignore[no-untyped-def]
    ens = Ensemble("torch_binding", max_batch_size=4)
    a, b = ens.input("A", "FP32", [3]), ens.input("B", "FP32", [3])
    diff, total = difference_step(["b", "a"])(b=b, a=a)  # declared in the other order than forward(a, b)
    ens.output("DIFF", diff)
    ens.output("TOTAL", total)
    left, right = np.array([[5.0, 6, 7]], dtype=np.float32), np.array([[1.0, 2, 3]], dtype=np.float32)
    ens.sample("a minus b", {"A": left, "B": right}, {"DIFF": left - right, "TOTAL": left + right})
    archive = build_ensemble(ens, tmp_path, "local", RELEASE)
    report = replay_archives([archive], server=triton, endpoints=["kserve"])
    assert report.passed, report.table()


def test_production_wiring_means_what_torch_computes_for_each_forward_argument() -> None:
    """Without conch's stand-in: Triton's libtorch backend binds a model input to the forward() argument
    of the same name and OUTPUT__n to element n of the result. Read the production configs, take forward()'s
    arguments from torch's own schema, run the module with torch directly, and check that every ensemble
    tensor is wired to what it means."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    ens = Ensemble("torch_prod", max_batch_size=4)
    a, b = ens.input("A", "FP32", [3]), ens.input("B", "FP32", [3])
    diff, total = difference_step(["b", "a"])(b=b, a=a)  # declared in the other order than forward(a, b)
    ens.output("DIFF", diff)
    ens.output("TOTAL", total)
    repo = render_repository(ens, "production", RELEASE)

    def config(name: str) -> model_config_pb2.ModelConfig:
        return text_format.Parse(repo.files[f"{name}/config.pbtxt"].decode(), model_config_pb2.ModelConfig())  # type: ignore[union-attr]

    module = torch.jit.load(io.BytesIO(repo.files["torch_prod__difference/1/model.pt"]))  # type: ignore[arg-type]
    arguments = [arg.name for arg in module.forward.schema.arguments][1:]  # torch's view; drop self
    step = config("torch_prod__difference")
    assert step.platform == "pytorch_libtorch"
    assert sorted(i.name for i in step.input) == sorted(arguments)  # every input names a forward() argument
    (call,) = config("torch_prod").ensemble_scheduling.step
    feeds = {model_input: ensemble_tensor for model_input, ensemble_tensor in call.input_map.items()}
    fetches = {ensemble_tensor: model_output for model_output, ensemble_tensor in call.output_map.items()}
    values = {"A": torch.tensor([[5.0, 6, 7]]), "B": torch.tensor([[1.0, 2, 3]])}
    result = module(**{arg: values[feeds[arg]] for arg in arguments})
    by_output = {f"OUTPUT__{i}": r for i, r in enumerate(result)}
    assert torch.equal(by_output[fetches["DIFF"]], values["A"] - values["B"])
    assert torch.equal(by_output[fetches["TOTAL"]], values["A"] + values["B"])


class _Counted(torch.nn.Module):
    def forward(self, x: torch.Tensor, n: int) -> torch.Tensor:
        return x * n


class _Named(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"y": x}


class _Total(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum()


def _one_input(module: Any, outputs: list[Tensor] | None = None) -> TorchScriptStep:
    return TorchScriptStep("m", module, inputs=[Tensor("x", "FP32", [4])],
                           outputs=outputs or [Tensor("OUTPUT__0", "FP32", [4])],
                           max_batch_size=4)


@pytest.mark.parametrize(("make", "message"), [
    (lambda: _one_input(torch.jit.script(_Counted())), r"forward\(\) in model.pt takes n: int; conch binds tensor "
                                                       r"arguments only"),
    (lambda: _one_input(b"not torchscript"), r"model.pt is not a TorchScript file torch can load: RuntimeError"),
    (lambda: _one_input(torch.jit.script(_Named())), r"forward\(\) returned dict; the libtorch backend needs a "
                                                     r"tensor or a tuple of tensors"),
    (lambda: _one_input(torch.jit.script(_Total())), r"output 'OUTPUT__0' has shape \[\] for a batch of \d+; with "
                                                     r"max_batch_size > 0 outputs keep the batch dimension first"),
    (lambda: _one_input(torch_modules.affine(), [Tensor("OUTPUT__0", "FP32", [5])]),
     r"output 'OUTPUT__0' is declared with dims \[5\] but model.pt returns \[4\]"),
], ids=["int-argument", "not-torchscript", "dict-result", "no-batch-axis", "wrong-dims"])
def test_modules_the_libtorch_backend_cannot_serve_as_declared_are_refused(make: Any, message: str) -> None:
    with pytest.raises(BuildError, match=rf"pytorch step 'm': {message}"):
        make().check(RELEASE)


def test_two_inputs_naming_one_forward_position_are_refused() -> None:
    with pytest.raises(BuildError, match=r"inputs 'INPUT__0' and 'INPUT__00' both name forward\(\) argument 0"):
        bind_inputs("s", ["INPUT__0", "INPUT__00"], ["a", "b"])


def test_a_binding_is_remembered_so_an_unchanged_rebuild_loads_no_torchscript(monkeypatch: pytest.MonkeyPatch) -> None:
    """The binding (and the probe) of the same file, torch and declaration is read from conch's cache; a
    changed declaration binds and probes again."""
    assert difference_step(["b", "a"]).binding().inputs == ("a", "b")

    def no_load(self: TorchScriptStep) -> None:
        raise AssertionError("loaded the TorchScript file again")

    monkeypatch.setattr(TorchScriptStep, "_load", no_load)
    assert difference_step(["b", "a"]).binding().inputs == ("a", "b")
    with pytest.raises(AssertionError, match="loaded the TorchScript file again"):
        difference_step(["a", "b"], outputs=("OUTPUT__0", "OUT__1")).binding()


def test_a_refreshing_build_binds_and_probes_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """`conch build --refresh` derives what conch remembers of a step again instead of reading it."""
    from conch.cache import refreshing

    assert difference_step(["b", "a"]).binding().inputs == ("a", "b")

    def no_load(self: TorchScriptStep) -> None:
        raise AssertionError("loaded the TorchScript file again")

    monkeypatch.setattr(TorchScriptStep, "_load", no_load)
    with refreshing(), pytest.raises(AssertionError, match="loaded the TorchScript file again"):
        difference_step(["b", "a"]).binding()


def test_a_refreshing_repository_build_binds_again_whichever_entry_point(monkeypatch: pytest.MonkeyPatch) -> None:
    """`repository_build(..., refresh=True)` (what render_repository calls) derives a step's binding again,
    not only a build entered through render_repository."""
    from conch.builder.repository_build import repository_build

    def declared() -> Ensemble:  # a new declaration each time, as each `conch build` imports the file anew
        ens = Ensemble("refreshed", max_batch_size=4)
        outputs = difference_step(["a", "b"])(ens.input("a", "FP32", [3]), ens.input("b", "FP32", [3]))
        ens.output("OUTPUT__0", outputs[0])  # type: ignore[index]
        ens.discard(outputs[1])  # type: ignore[index]
        return ens

    repository_build(declared(), "local", RELEASE)  # remembered

    loads = []
    original = TorchScriptStep._load

    def counted(self: TorchScriptStep) -> object:
        loads.append(self.name)
        return original(self)

    monkeypatch.setattr(TorchScriptStep, "_load", counted)
    repository_build(declared(), "local", RELEASE)
    assert loads == []
    repository_build(declared(), "local", RELEASE, refresh=True)
    assert loads == ["difference"]
