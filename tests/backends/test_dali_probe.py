"""A DALI pipeline whose real outputs differ from the declaration fails the build (the CPU pipeline runs
once on a generated input), not the replay."""

from __future__ import annotations

import tarfile
from pathlib import Path

import dali_pipelines
import pytest

from conch import BuildError, DaliStep, Ensemble, Tensor
from conch.archive.fleet_check import check_archive_models
from conch.builder.repository_build import build_ensemble


def read_file(archive: Path, name: str) -> str:
    with tarfile.open(archive) as tar:
        member = tar.extractfile(name)
        assert member is not None, name
        return member.read().decode()


def build(tmp_path: Path, step: DaliStep, dtype: str, dims: list[int], target: str = "production") -> Path:
    ens = Ensemble("probe", max_batch_size=4)
    ens.output("OUT", step(ens.input("IN", dtype, dims)))
    return build_ensemble(ens, tmp_path, target)


def test_declared_dims_that_the_pipeline_does_not_return_fail_the_build(tmp_path: Path) -> None:
    step = DaliStep("resize", dali_pipelines.decode_resize, inputs=[Tensor("IMAGES", "UINT8", [-1])],
                    outputs=[Tensor("PIXELS", "FP32", [299, 299, 3])], max_batch_size=4)
    message = (r"dali step 'resize': output 'PIXELS' \(pipeline output 0\) is declared with dims \[299, 299, 3\] "
               r"but the pipeline returns samples of shape \[32, 32, 3\]")
    with pytest.raises(BuildError, match=message):
        build(tmp_path, step, "UINT8", [-1])
    assert not list(tmp_path.iterdir())


def test_declared_dtype_that_the_pipeline_does_not_return_fails_the_build(tmp_path: Path) -> None:
    step = DaliStep("resize", dali_pipelines.decode_resize, inputs=[Tensor("IMAGES", "UINT8", [-1])],
                    outputs=[Tensor("PIXELS", "UINT8", [32, 32, 3])], max_batch_size=4)
    with pytest.raises(BuildError, match=r"output 'PIXELS' \(pipeline output 0\) is declared UINT8 but the "
                                         "pipeline returns float32"):
        build(tmp_path, step, "UINT8", [-1], "local")


def test_a_matching_declaration_builds_and_probe_false_skips_the_run(tmp_path: Path) -> None:
    good = DaliStep("resize", dali_pipelines.decode_resize, inputs=[Tensor("IMAGES", "UINT8", [-1])],
                    outputs=[Tensor("PIXELS", "FP32", [32, 32, 3])], max_batch_size=4)
    assert check_archive_models(build(tmp_path / "a", good, "UINT8", [-1]))[0].ok
    unchecked = DaliStep("resize", dali_pipelines.decode_resize, inputs=[Tensor("IMAGES", "UINT8", [-1])],
                         outputs=[Tensor("PIXELS", "FP32", [299, 299, 3])], max_batch_size=4, probe=False)
    archive = build(tmp_path / "b", unchecked, "UINT8", [-1])
    # probe=False takes the declaration as written: the config says what the user declared
    config = read_file(archive, "probe__resize/config.pbtxt")
    assert "dims: [ 299, 299, 3 ]" in config and check_archive_models(archive)[0].ok


def test_a_build_without_the_probe_does_not_vouch_for_one_with_it(tmp_path: Path) -> None:
    """Builds remember checks that passed; a check run with probe=False must not count for probe=True."""
    def step(probe: bool) -> DaliStep:
        return DaliStep("resize", dali_pipelines.decode_resize, inputs=[Tensor("IMAGES", "UINT8", [-1])],
                        outputs=[Tensor("PIXELS", "FP32", [299, 299, 3])], max_batch_size=4, probe=probe)

    assert check_archive_models(build(tmp_path / "unprobed", step(False), "UINT8", [-1]))[0].ok
    with pytest.raises(BuildError, match=r"is declared with dims \[299, 299, 3\] but the pipeline returns"):
        build(tmp_path / "probed", step(True), "UINT8", [-1])
