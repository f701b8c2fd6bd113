"""A Python model folder without config.pbtxt, which Triton with SageMaker's flags (auto-complete on) loads with
the config its model.py's auto_complete_config gives: `conch check` runs that function and judges the folder by
the completed config, as an archive, a model folder or through the local MME."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest
from load_rule_cases import MODEL_PY, Base, Case, cases
from seed_archives import pack_repo
from single_models import AUTO_SUM_MODEL, auto_sum_repo, simple_onnx, write_repo

from conch.archive.verify import check_folder, check_repository, checked, is_model_repository
from conch.cli import main
from conch.image_python import IMAGE_PYTHON_DIR_ENV, find_interpreter
from conch.replays.local_replay import stage
from conch.triton.mme import MultiModelClient
from conch.triton.server import LocalTriton


def test_an_auto_complete_folder_passes_check_judged_by_its_completed_config(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    archive = pack_repo(auto_sum_repo(), tmp_path / "auto_sum.tar.gz")
    with checked(archive) as (report, _):
        assert report.ok, report.lines()
        assert report.single == "auto_sum"
        config = report.configs["auto_sum"]
        assert config.served == "python" and config.max_batch_size == 4
        assert [(t.name, t.data_type, list(t.dims)) for t in config.io("input")] == [
            ("INPUT0", "TYPE_FP32", [4]), ("INPUT1", "TYPE_FP32", [4])]
        assert config.carried.HasField("dynamic_batching")
    folder = write_repo(auto_sum_repo(), tmp_path / "repo")
    assert is_model_repository(folder)
    assert main(["check", str(folder)]) == 0
    out = capsys.readouterr().out
    assert ("repo/auto_sum/: warning: has no config.pbtxt: Triton with SageMaker's flags (auto-complete on) loads it "
            "with the config auto_sum/1/model.py's auto_complete_config gives, which conch ran on Python") in out
    assert "and checks here (max_batch_size 4, INPUT0, INPUT1, OUTPUT0, OUTPUT1); write a config.pbtxt" in out


def test_an_auto_complete_function_that_fails_is_refused_as_triton_refuses_the_model(tmp_path: Path) -> None:
    broken = AUTO_SUM_MODEL.replace(b"config.set_max_batch_size(4)", b"config.set_max_batch_size(4)\n"
                                    b"        config.add_input({'name': 'INPUT0', 'data_type': 'TYPE_INT8', "
                                    b"'dims': [4]})")
    report = check_repository(write_repo({"auto_sum/1/model.py": broken}, tmp_path / "repo"))
    (error,) = report.errors
    assert error.file == "auto_sum/1/model.py"
    assert re.match(r"auto_complete_config fails on Python 3\.\d+, so Triton refuses to load 'auto_sum' \(there is no "
                    r"config.pbtxt to load instead\): ValueError: unable to load model 'auto_sum', configuration "
                    r"expects datatype TYPE_FP32 for input 'INPUT0', model provides TYPE_INT8", error.message)


def test_a_config_pbtxt_that_auto_complete_config_completes_is_judged_completed(tmp_path: Path) -> None:
    """Triton with SageMaker's flags runs a Python model's auto_complete_config over its config.pbtxt too: the
    load-rule case io_by_auto_complete (a config without inputs or outputs) loads, and says so; a function that
    leaves the config as it is says nothing."""
    case = next(c for c in cases() if c.id == "io_by_auto_complete")
    report = check_folder(case.write(tmp_path), case.id, "24.10")
    assert report.errors == []
    (said,) = [f.message for f in report.findings if "auto_complete_config" in f.message]
    assert said.startswith(f"is completed by {case.served.removesuffix('ens')}add/1/model.py's auto_complete_config "
                           "(run on Python ")
    assert "(max_batch_size 0, IN, OUT)" in said
    same = "class TritonPythonModel:\n    auto_complete_config = staticmethod(lambda c: c)\n"
    unchanged = Base("k_", more={"k_add/1/model.py": MODEL_PY.replace("class TritonPythonModel:\n", same)})
    repo = Case("unchanged", "auto-complete", unchanged.files(), "k_ens").write(tmp_path)
    report = check_folder(repo, "unchanged", "24.10")
    assert not [f for f in report.findings if "auto_complete_config" in f.message or f.level == "error"]



def test_without_the_images_packages_conch_s_own_python_completes_and_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cold cache and an index that does not answer: the image's venv cannot be made, so conch's own Python runs
    auto_complete_config, and the finding names it."""
    for name, value in {"CONCH_CACHE_DIR": str(tmp_path / "cache"), IMAGE_PYTHON_DIR_ENV: str(tmp_path / "image"),
                        "PIP_INDEX_URL": "http://127.0.0.1:9/simple",
                        "PIP_EXTRA_INDEX_URL": "", "PIP_FIND_LINKS": "", "PIP_NO_CACHE_DIR": "1",
                        "PIP_RETRIES": "0"}.items():
        monkeypatch.setenv(name, value)
    case = next(c for c in cases() if c.id == "io_by_auto_complete")
    report = check_folder(case.write(tmp_path), case.id, "24.10")
    (said,) = [f.message for f in report.findings if "auto_complete_config" in f.message]
    own = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert f"(run on Python {own}; conch's own; Triton 24.10's image runs 3.10)" in said



def test_an_onnx_config_without_inputs_or_outputs_is_judged_by_its_model_file(tmp_path: Path) -> None:
    """ONNX Runtime's backend completes the tensors from model.onnx with SageMaker's flags: conch reads them from
    the file (conch once refused such a config: no inputs), and a file it cannot read leaves the config as written."""
    bare = 'name: "simple"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8\n'
    report = check_repository(write_repo({"simple/config.pbtxt": bare.encode(), "simple/1/model.onnx": simple_onnx()},
                                         tmp_path / "repo"))
    assert report.ok, report.lines()
    (said,) = [f.message for f in report.findings if "ONNX Runtime" in f.message]
    assert said.startswith("names no inputs or outputs: ONNX Runtime's backend completes them from "
                           "simple/1/model.onnx with SageMaker's flags (auto-complete on), and conch checks them as "
                           "read from it (INPUT0, INPUT1, OUTPUT0, OUTPUT1)")
    assert report.configs["simple"].inputs[0].dims == (16,)
    broken = check_repository(write_repo({"simple/config.pbtxt": bare.encode(), "simple/1/model.onnx": b"no onnx"},
                                         tmp_path / "broken"))
    assert not [f for f in broken.findings if "ONNX Runtime" in f.message]



def test_without_the_onnx_package_such_a_config_is_judged_as_written_and_the_check_says_why(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """onnx is an extra (conch[onnx]): a base install's check names it instead of failing on the import."""
    bare = 'name: "simple"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8\n'
    repo = write_repo({"simple/config.pbtxt": bare.encode(), "simple/1/model.onnx": simple_onnx()}, tmp_path / "repo")
    monkeypatch.setitem(sys.modules, "onnx", None)  # `import onnx` raises ImportError, as where it is not installed
    report = check_repository(repo)
    (said,) = [f.message for f in report.findings if "ONNX Runtime" in f.message]
    assert said.endswith("conch reads them with the onnx package, which is not installed (pip install "
                         "'conch[onnx]'), so the config is judged as written"), said

def test_a_model_importing_torch_without_an_environment_is_named(tmp_path: Path) -> None:
    """As python_backend's pytorch example is kept without an environment: torch is not in the image. With the
    release's Python on this machine, auto_complete_config runs in the image's packages as Triton runs it, and
    fails there first (Triton refuses the model at auto-complete); without it, the import check names torch."""
    model = AUTO_SUM_MODEL.replace(b"import numpy as np\n", b"import numpy as np\nimport torch\n")
    report = check_repository(write_repo({"auto_sum/1/model.py": model}, tmp_path / "repo"))
    (first,) = [f.message for f in report.errors]
    if find_interpreter("3.10") is not None:
        assert first.startswith("auto_complete_config fails on Python 3.10, so Triton refuses to load 'auto_sum'")
        assert "ModuleNotFoundError: No module named 'torch'; the image's Python holds only" in first
        assert first.endswith("(env= on a conch step; EXECUTION_ENV_PATH in a config.pbtxt)")
    else:
        assert first.split(",")[0] == "line 2: imports torch"


@pytest.mark.integration
def test_an_auto_complete_archive_answers_through_the_local_server(tmp_path: Path, triton: LocalTriton) -> None:
    archive = pack_repo(auto_sum_repo(), tmp_path / "auto_sum.tar.gz")
    assert "--disable-auto-complete-config" not in triton.command()  # as SageMaker's serve script starts it
    client = MultiModelClient(triton.sagemaker_url, triton.http_url)
    client.load(archive.name, stage(archive, triton), timeout=120)
    try:
        a, b = np.arange(8, dtype=np.float32).reshape(2, 4), np.ones((2, 4), np.float32)
        answer = client.invoke_binary(archive.name, {"INPUT0": a, "INPUT1": b})
        np.testing.assert_array_equal(answer["OUTPUT0"], a + b)
        np.testing.assert_array_equal(answer["OUTPUT1"], a - b)
    finally:
        client.unload(archive.name)
