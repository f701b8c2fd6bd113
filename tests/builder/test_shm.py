"""Shared memory sized for SageMaker: each Python-backend step's figure from its declared tensors and
max_batch_size (samples for variable dims and BYTES), the manifest, the build warning, the local server's
backend-configs and the container environment `conch deploy` sets."""

from __future__ import annotations

from pathlib import Path

import basic_steps
import numpy as np
import pytest
from conftest import linear_ensemble
from run_pipelines import image_ensemble, text_ensemble

from conch import Ensemble, PythonStep, Tensor
from conch.builder.discover import discover
from conch.builder.repository_build import build_ensemble, render_repository
from conch.builder.shm_sizing import ENV_DEFAULT, ENV_GROWTH, MARGIN_BYTES, MIB, archives_settings
from conch.sagemaker.shm_environment import shm_environment
from conch.triton.server import LocalTriton

EXAMPLES = Path(__file__).parents[2] / "ensembles"
IMAGE_BYTES = 3 * 224 * 224 * 4


def test_large_tensors_are_sized_recorded_and_warned(tmp_path: Path) -> None:
    said: list[str] = []
    repo = render_repository(image_ensemble("shm_images"), "production", "24.10", progress=said.append)
    shm = repo.manifest["shm"]
    need = 64 * 2 * IMAGE_BYTES + MARGIN_BYTES  # a full batch in and out, plus the region's own objects
    assert shm["steps"] == {"shm_images__brighten": {"batch": 64, "bytes": need, "instances": 1}}
    assert shm["need_bytes"] == need and shm["default_byte_size"] == 75 * MIB  # rounded up to MiB
    (warning,) = [s for s in said if s.startswith("warning:")]
    assert ("warning: ensemble 'shm_images': Python-backend model 'shm_images__brighten' passes up to 74.5 MiB "
            "through shared memory per batch (max_batch_size 64), more than the 16.0 MiB SageMaker's Triton image "
            f"gives each Python model instance; `conch deploy` sets {ENV_DEFAULT}={75 * MIB}") in warning
    assert warning.removeprefix("warning: ") in repo.notes


def test_small_tensors_keep_the_defaults_without_a_warning() -> None:
    said: list[str] = []
    repo = render_repository(linear_ensemble("shm_small"), "production", "24.10", progress=said.append)
    assert repo.manifest["shm"]["default_byte_size"] == 16 * MIB
    assert repo.manifest["shm"]["need_bytes"] == 8 * (16 + 16) + MARGIN_BYTES
    assert not any(s.startswith("warning:") for s in said)


def test_variable_dims_and_bytes_are_sized_from_the_samples() -> None:
    ens = text_ensemble("shm_text")
    repo = render_repository(ens, "production", "24.10")
    assert repo.manifest["shm"]["unknown"] == ["shm_text__as_text output t", "shm_text__text_length input t"]
    ens.sample("long", {"X": np.full((2, 4), 2500.0, np.float32)}, {"N": np.full((2, 1), 5, np.int32)})
    steps = render_repository(ens, "production", "24.10").manifest["shm"]["steps"]
    # "10000" is 5 bytes + a 4-byte length per row; a full batch is 4 rows
    assert steps["shm_text__as_text"]["bytes"] == 4 * (16 + 9) + MARGIN_BYTES
    assert steps["shm_text__text_length"]["bytes"] == 4 * (9 + 4) + MARGIN_BYTES


def test_only_python_backend_steps_count_in_production() -> None:
    (ens,) = discover([EXAMPLES / "resnet_pytorch.py"])
    assert render_repository(ens, "production", "24.10").manifest["shm"]["steps"] == {}
    local = render_repository(ens, "local", "24.10").manifest["shm"]  # the torch stand-in is a Python model
    assert local["need_bytes"] == 128 * (IMAGE_BYTES + 1000 * 4) + MARGIN_BYTES


def test_deploy_environment_and_local_server_get_what_the_archives_need(tmp_path: Path) -> None:
    big = build_ensemble(image_ensemble("shm_images"), tmp_path, "production")
    small = build_ensemble(linear_ensemble("shm_small"), tmp_path, "production")
    env, said = shm_environment([big, small], {"SAGEMAKER_TRITON_LOG_VERBOSE": "true"})
    assert env == {"SAGEMAKER_TRITON_LOG_VERBOSE": "true", ENV_DEFAULT: str(75 * MIB)}
    assert said == [f"set {ENV_DEFAULT}={75 * MIB} (75 MiB; the image's default is 16 MiB): shm_images.tar.gz's "
                    "largest Python-backend step passes up to 74.5 MiB per batch"]
    kept, said = shm_environment([big], {ENV_DEFAULT: "1048576"})
    assert kept == {ENV_DEFAULT: "1048576"} and said[0].startswith(f"kept {ENV_DEFAULT}=1048576 from --env")
    assert shm_environment([small], {})[0] == {}
    assert archives_settings([big, small]) == (75 * MIB, MIB)
    assert archives_settings([small, tmp_path / "missing.tar.gz"]) == (16 * MIB, MIB)
    command = LocalTriton(tmp_path / "server", shm_default_byte_size=75 * MIB).command()
    assert f"--backend-config=python,shm-default-byte-size={75 * MIB}" in command
    assert "--backend-config=python,shm-growth-byte-size=1048576" in command
    assert ENV_GROWTH not in env


@pytest.mark.integration
def test_a_replay_starts_its_server_with_the_shm_the_archives_need(tmp_path: Path) -> None:
    from conch.replays.local_replay import replay_archives

    ens = image_ensemble("shm_replay", batch=16)
    x = np.zeros((16, 3, 224, 224), np.float32)  # 9.2 MiB each way: 19.4 MiB with the margin
    ens.sample("full batch", {"IMAGE": x}, {"OUT": x + np.float32(0.1)})
    said: list[str] = []
    report = replay_archives([build_ensemble(ens, tmp_path, "local")], endpoints=["kserve"], progress=said.append)
    assert report.passed, report.table()
    assert not any("shm-default-byte-size" in s for s in said)  # the local server's own sizing is silent


def test_a_local_build_warns_about_the_production_steps_only() -> None:
    """resnet_pytorch's local stand-in runs on the Python backend (and needs 74 MiB there), but in production
    the step is TorchScript: nothing for `conch deploy` to set, so no warning."""
    (ens,) = discover([EXAMPLES / "resnet_pytorch.py"])
    said: list[str] = []
    repo = render_repository(ens, "local", "24.10", progress=said.append)
    assert repo.manifest["shm"]["need_bytes"] > 16 * MIB  # the local server is sized for the stand-in
    assert not [s for s in said if s.startswith("warning:")]
    assert not any("shared memory" in note for note in repo.notes)


def test_a_production_shortfall_and_unsized_tensors_are_one_line() -> None:
    ens = text_ensemble("shm_both")
    said: list[str] = []
    render_repository(ens, "production", "24.10", progress=said.append)
    (warning,) = [s for s in said if s.startswith("warning:")]
    assert warning.startswith("warning: ensemble 'shm_both': shared memory not sized for shm_both__as_text output t")


def test_samples_that_cannot_run_here_leave_sizes_unmeasured_not_the_build_failed() -> None:
    ens = Ensemble("shm_broken", max_batch_size=4)
    step = PythonStep("broken", basic_steps.broken, inputs=[Tensor("x", "BYTES", [1])],
                      outputs=[Tensor("y", "FP32", [4])],
                      max_batch_size=4)
    ens.output("Y", step(ens.input("X", "BYTES", [1])))
    ens.sample("one", {"X": [[b"a"]]}, {"Y": np.zeros((1, 4), np.float32)})
    said: list[str] = []
    shm = render_repository(ens, "production", "24.10", progress=said.append).manifest["shm"]
    assert shm["unknown"] == ["shm_broken__broken input x"]
    assert "step 'broken' (python) raised ValueError: the user code failed on purpose" in shm["unmeasured"]
    assert any("shared memory not sized for shm_broken__broken input x (variable dims or BYTES): running the "
               "samples failed" in s for s in said)
