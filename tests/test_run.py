"""`conch run` and conch.run(): the DAG in this process through each step's CPU path, every tensor kept,
disagreements with the declaration named, and the same answers as the local Triton replay."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path

import basic_steps
import numpy as np
import pytest
import run_steps
from conftest import EXAMPLE_FILES, ExampleArchives, linear_ensemble
from run_pipelines import counter_ensemble, text_ensemble
from single_models import ADD_SUB_INPUTS, ADD_SUB_MODEL, add_sub_repo, auto_sum_repo, write_repo

import conch
from conch import Ensemble, Executor, PythonStep, RunError, Tensor
from conch.cli import main
from conch.ensembles.samples import compare
from conch.importer.convert import import_sources
from conch.replays.local_replay import stage
from conch.triton.mme import MultiModelClient
from conch.triton.server import LocalTriton

EXAMPLES = Path(__file__).parent.parent / "ensembles"


def one_step(name: str, code, out_dims: list[int], out_dtype: str = "FP32") -> Ensemble:  # type: ignore[no-untyped-def]
    ens = Ensemble(name, max_batch_size=4)
    step = PythonStep(code.__name__, code, inputs=[Tensor("x", "FP32", [4])],
                      outputs=[Tensor("y", out_dtype, out_dims)],
                      max_batch_size=4)
    ens.output("Y", step(ens.input("X", "FP32", [4])))
    return ens


def test_run_returns_outputs_and_on_request_every_intermediate_tensor() -> None:
    ens = linear_ensemble("run_linear")
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    result = conch.run(ens, {"X": x})
    np.testing.assert_array_equal(result["Z"], x * 2 + 1)
    assert result.tensors == {}
    with pytest.warns(DeprecationWarning, match=r"^Ensemble\.run is deprecated: call conch\.run\(ensemble, inputs, "
                                                r"\.\.\.\) \(conch\.Executor to run many requests, or to see each step "
                                                r"as it runs\); Ensemble\.run goes in the next release$"):
        np.testing.assert_array_equal(ens.run({"X": x})["Z"], result["Z"])  # the old spelling, delegating
    full = conch.run(ens, {"X": x.tolist()}, intermediates=True)
    assert list(full.tensors) == ["X", "double.y", "Z"]
    np.testing.assert_array_equal(full.tensors["double.y"], x * 2)
    assert [(s.step, s.model_name) for s in full.steps] == [("double", "run_linear__double"),
                                                            ("add_one", "run_linear__add_one")]
    assert list(full.steps[0].inputs) == ["x"] and list(full.steps[0].outputs) == ["y"]


def test_an_executor_loads_each_step_once_and_tears_down_at_close() -> None:
    ens = counter_ensemble("run_counter")
    zeros = np.zeros((1, 4), np.float32)
    with Executor(ens) as executor:
        firsts = [executor.run({"X": zeros})["Y"][0, 0] for _ in range(3)]
    assert firsts == [1.0, 2.0, 3.0]  # one instance, set up once, state kept across requests


def test_bytes_outputs_reach_the_next_step_as_bytes_as_through_triton() -> None:
    ens = text_ensemble("run_text")
    result = conch.run(ens, {"X": np.full((2, 4), 2.5, np.float32)}, intermediates=True)
    assert result.tensors["as_text.t"].tolist() == [[b"10"], [b"10"]]
    assert result["N"].tolist() == [[2], [2]]


def test_a_step_producing_other_dims_than_declared_is_named() -> None:
    ens = one_step("run_dims", run_steps.three_wide, [4])
    x = np.ones((2, 4), np.float32)
    with pytest.raises(RunError, match=r"ensemble 'run_dims', step 'three_wide' \(python\): output 'y' is declared "
                                       r"with shape \[-1, 4\] \(dims \[4\]\) but the step produced shape \[2, 3\]"):
        conch.run(ens, {"X": x})
    lenient = conch.run(ens, {"X": x}, strict=False)
    assert len(lenient.problems) == 1 and "three_wide" in lenient.problems[0]
    assert lenient["Y"].shape == (2, 3)


def test_a_step_producing_another_dtype_is_named() -> None:
    ens = one_step("run_dtype", basic_steps.wrong_dtype, [4])
    with pytest.raises(RunError, match=r"step 'wrong_dtype' \(python\) raised TypeError: .*output 'y' is declared "
                                       r"FP32 \(numpy float32\) but the code returned dtype float64"):
        conch.run(ens, {"X": np.ones((1, 4), np.float32)})


def test_a_failing_step_and_a_bad_payload_are_named() -> None:
    ens = one_step("run_broken", basic_steps.broken, [4])
    with pytest.raises(RunError, match=r"step 'broken' \(python\) raised ValueError: the user code failed on purpose"):
        conch.run(ens, {"X": np.ones((1, 4), np.float32)})
    with pytest.raises(conch.DeclarationError, match=r"input 'X' has shape \[1, 3\], expected \[-1, 4\]"):
        conch.run(ens, {"X": np.ones((1, 3), np.float32)})


def test_a_step_failing_at_load_is_named() -> None:
    ens = Ensemble("run_setup", max_batch_size=4)
    step = PythonStep("prefix", basic_steps.Prefixer, inputs=[Tensor("TEXT", "BYTES", [1])],
                      outputs=[Tensor("OUT", "BYTES", [1])],
                      max_batch_size=4)  # its setup() reads a file the step does not ship
    ens.output("OUT", step(ens.input("TEXT", "BYTES", [1])))
    with pytest.raises(RunError, match=r"ensemble 'run_setup', step 'prefix' \(python\): loading it failed: "
                                       r"FileNotFoundError: step 'prefix': no file 'prefix.txt'"):
        conch.run(ens, {"TEXT": [[b"a"]]})


def test_cli_prints_every_step_and_names_the_disagreeing_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "run_cli_dims.py"
    source.write_text(
        "import numpy as np\nfrom run_steps import three_wide\nfrom conch import Ensemble, PythonStep, Tensor\n"
        "ens = Ensemble('run_cli_dims', max_batch_size=4)\n"
        "step = PythonStep('three_wide', three_wide, inputs=[Tensor('x', 'FP32', [4])], "
        "outputs=[Tensor('y', 'FP32', [4])], max_batch_size=4)\n"
        "ens.output('Y', step(ens.input('X', 'FP32', [4])))\n"
        "ens.sample('ones', {'X': np.ones((2, 4), np.float32)}, {'Y': np.ones((2, 4), np.float32)})\n"
    )
    assert main(["run", str(source), "--sample", "ones"]) == 1
    out = capsys.readouterr().out
    assert "step three_wide (python, model run_cli_dims__three_wide)" in out
    assert "in   x                            FP32   [2, 4]         1 1 1 1 1 1 ..." in out
    assert "DISAGREES: ensemble 'run_cli_dims', step 'three_wide' (python): output 'y' is declared with shape" in out
    assert "expected: MISMATCH shape [2, 3] != expected [2, 4]" in out


def test_cli_runs_an_example_green(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(EXAMPLES / "resnet_pytorch.py")]) == 0
    out = capsys.readouterr().out
    assert "step resnet (pytorch, model resnet_pytorch__resnet)" in out
    assert out.count("expected: ok") == 2


def test_cli_unknown_sample_is_one_error_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(EXAMPLES / "resnet_pytorch.py"), "--sample", "nope"]) == 2
    err = capsys.readouterr().err
    assert "conch: error: ensemble 'resnet_pytorch' has no sample 'nope'; its samples are 'two images', 'one image'" \
        in err


@pytest.fixture(scope="module")
def own_triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalTriton]:
    """A server of this module's own: the examples' step names are loaded by other tests' servers too, and
    without model namespacing a step name is loaded once per server."""
    with LocalTriton(tmp_path_factory.mktemp("run-triton")) as server:
        yield server


@pytest.mark.integration
@pytest.mark.parametrize("file", EXAMPLE_FILES)
def test_run_equals_the_local_triton_replay(file: str, examples: ExampleArchives, own_triton: LocalTriton) -> None:
    """README: `conch run` answers as the local Triton replay does, for every example (archives built once per
    session, shared with the other example tests)."""
    ens = examples.ensemble(file)
    archive = examples.archive(file, "local")
    client = MultiModelClient(own_triton.sagemaker_url, own_triton.http_url)
    name = archive.name
    client.load(name, stage(archive, own_triton), 300)
    try:
        with Executor(ens) as executor:
            for sample in ens.samples:
                ran = executor.run(sample.inputs)
                served = client.invoke_kserve(name, sample.inputs)
                for out in ens.outputs:
                    verdict = compare(out, ran[out], served[out], sample.tolerance)
                    assert verdict.passed, f"{ens.name} {sample.name!r} {out}: {verdict.detail}"
    finally:
        client.unload(name)


def test_a_hand_written_model_brought_in_by_import_runs_as_triton_runs_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Triton's contract: initialize and finalize optional, execute over a list of requests, the latest version
    folder loaded (its helper module, imported at run time, found beside model.py)."""
    latest = ADD_SUB_MODEL.replace(b"import triton_python_backend_utils as pb_utils",
                                   b"import triton_python_backend_utils as pb_utils\nimport importlib")
    latest = latest.replace(b"a + b", b"importlib.import_module('twice').twice(a + b)")
    repo = {**add_sub_repo(), "add_sub/3/model.py": latest, "add_sub/3/twice.py": b"def twice(x):\n    return x * 2\n"}
    folder = write_repo(repo, tmp_path / "repo")
    (imported,) = import_sources([folder], tmp_path / "out", samples=False)
    spec = importlib.util.spec_from_file_location(imported.module.stem, imported.module)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    ens = getattr(module, imported.ensemble)
    result = conch.run(ens, ADD_SUB_INPUTS)
    a, b = ADD_SUB_INPUTS["INPUT0"], ADD_SUB_INPUTS["INPUT1"]
    np.testing.assert_array_equal(result["OUTPUT0"], (a + b) * 2)  # version 3, not 1
    np.testing.assert_array_equal(result["OUTPUT1"], a - b)
    source = tmp_path / "run_imported.py"
    source.write_text(f"import importlib.util, numpy as np\nspec = importlib.util.spec_from_file_location("
                      f"'m', {str(imported.module)!r})\nm = importlib.util.module_from_spec(spec)\n"
                      f"spec.loader.exec_module(m)\nens = m.{imported.ensemble}\n"
                      f"ens.sample('pair', {{k: np.array(v, np.float32) "
                      f"for k, v in {_lists(ADD_SUB_INPUTS)}.items()}}, "
                      f"{{'OUTPUT0': np.array({((a + b) * 2).tolist()}, np.float32), "
                      f"'OUTPUT1': np.array({(a - b).tolist()}, np.float32)}})\n")
    assert main(["run", str(source)]) == 0, capsys.readouterr().out
    assert "expected: ok" in capsys.readouterr().out


def _lists(arrays: dict[str, np.ndarray]) -> dict[str, list[float]]:
    return {k: v.tolist() for k, v in arrays.items()}


def test_an_auto_complete_model_brought_in_by_import_runs_with_the_config_it_completes(tmp_path: Path) -> None:
    folder = write_repo(auto_sum_repo(), tmp_path / "repo")
    (imported,) = import_sources([folder], tmp_path / "out", samples=False)
    assert imported.messages[0] == (
        "auto_sum/config.pbtxt: none; Triton completes it from auto_sum/<version>/model.py's auto_complete_config "
        "(auto-complete is on in SageMaker's image): conch declares the config it gives")
    spec = importlib.util.spec_from_file_location(imported.module.stem, imported.module)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    a, b = ADD_SUB_INPUTS["INPUT0"][None], ADD_SUB_INPUTS["INPUT1"][None]  # batching: max_batch_size 4
    result = conch.run(getattr(module, imported.ensemble), {"INPUT0": a, "INPUT1": b})
    np.testing.assert_array_equal(result["OUTPUT0"], a + b)
    np.testing.assert_array_equal(result["OUTPUT1"], a - b)
