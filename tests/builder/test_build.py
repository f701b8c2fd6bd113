"""Building archives: MME-ready layout, manifest, byte-identical rebuilds, no half tarballs."""

from __future__ import annotations

import functools
import hashlib
import json
import re
import sys
import tarfile
from pathlib import Path

import basic_steps
import numpy as np
import pytest
from conftest import linear_ensemble

from conch import BuildError, Ensemble, InstanceGroup, PythonStep, Release, Tensor
from conch.archive.manifest import MANIFEST_NAME
from conch.builder.repository_build import build_ensemble, render_repository
from conch.ensembles.samples import decode_array
from conch.errors import DeclarationError

ENSEMBLE_REGEX = re.compile(r'platform:(\s)*"ensemble"')


def members(archive: Path) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(archive) as tar:
        return {m.name: m for m in tar.getmembers()}


def read(archive: Path, name: str) -> bytes:
    with tarfile.open(archive) as tar:
        member = tar.extractfile(name)
        assert member is not None
        return member.read()


def test_archive_is_mme_ready(tmp_path: Path) -> None:
    archive = build_ensemble(linear_ensemble(), tmp_path)
    entries = members(archive)
    top = {n.split("/")[0] for n in entries}
    assert top == {"linear", "linear__double", "linear__add_one", MANIFEST_NAME}
    assert "config.pbtxt" not in entries, "a root config.pbtxt would make SageMaker load one single model"
    assert entries["linear/1"].isdir()
    assert not [n for n in entries if n.startswith("linear/1/")], "the ensemble's 1/ must be empty"
    ensembles = []
    for name in entries:
        if name.endswith("/config.pbtxt"):
            text = read(archive, name).decode()
            folder = name.split("/")[0]
            assert f'name: "{folder}"' in text, "each config's name must equal its folder"
            if ENSEMBLE_REGEX.search(text):
                ensembles.append(folder)
    assert ensembles == ["linear"], "exactly one config must match SageMaker's ensemble regex"


def test_entries_are_normalised(tmp_path: Path) -> None:
    archive = build_ensemble(linear_ensemble(), tmp_path)
    for m in members(archive).values():
        assert (m.uid, m.gid, m.uname, m.gname) == (0, 0, "", "")
        assert m.mtime == 946684800
    order = [(not m.isdir(), m.name) for m in members(archive).values()]
    assert order == sorted(order), "folders first, then files, each sorted"


def test_two_builds_are_byte_identical(tmp_path: Path) -> None:
    first = build_ensemble(linear_ensemble(), tmp_path / "a")
    Path(basic_steps.__file__).touch()  # a newer mtime on a source must not change the archive
    second = build_ensemble(linear_ensemble(), tmp_path / "b")
    assert first.read_bytes() == second.read_bytes()


def test_different_names_give_different_step_names(tmp_path: Path) -> None:
    one = render_repository(linear_ensemble("alpha"), "production", "24.10")
    two = render_repository(linear_ensemble("beta"), "production", "24.10")
    folders = lambda r: {n.split("/")[0] for n in r.files if "/" in n}  # noqa: E731
    assert not folders(one) & folders(two)


def test_manifest_records_hashes_release_schema_and_samples(tmp_path: Path) -> None:
    archive = build_ensemble(linear_ensemble(), tmp_path, "local", "24.05")
    manifest = json.loads(read(archive, MANIFEST_NAME))
    assert (manifest["target"], manifest["release"], manifest["stub_python"]) == ("local", "24.05", "3.10")
    assert manifest["schema"]["inputs"] == [{"name": "X", "datatype": "FP32", "dims": [4], "shape": [-1, 4]}]
    assert manifest["schema"]["outputs"][0]["name"] == "Z"
    for name, digest in manifest["files"].items():
        assert hashlib.sha256(read(archive, name)).hexdigest() == digest
    assert set(manifest["files"]) == {n for n, m in members(archive).items() if m.isfile()} - {MANIFEST_NAME}
    (sample,) = manifest["samples"]
    x = decode_array(sample["inputs"]["X"])
    np.testing.assert_array_equal(decode_array(sample["expected"]["Z"]), x * 2 + 1)


def test_missing_artifact_fails_naming_step_and_file_and_leaves_nothing(tmp_path: Path) -> None:
    ens = Ensemble("needs_file", max_batch_size=4)
    step = PythonStep("prefix", basic_steps.Prefixer, inputs=[Tensor("TEXT", "BYTES", [1])],
                      outputs=[Tensor("OUT", "BYTES", [1])],
                      files={"prefix.txt": tmp_path / "absent.txt"}, max_batch_size=4)
    ens.output("OUT", step(ens.input("TEXT", "BYTES", [1])))
    out = tmp_path / "dist"
    with pytest.raises(BuildError, match=r"ensemble 'needs_file': python step 'prefix': file 'prefix.txt'"):
        build_ensemble(ens, out)
    assert not out.exists() or not list(out.iterdir())


def test_failed_rebuild_keeps_the_previous_archive(tmp_path: Path) -> None:
    archive = build_ensemble(linear_ensemble(), tmp_path)
    before = archive.read_bytes()
    broken = linear_ensemble()
    broken.sample("bad", {"X": np.zeros((1, 4), np.float32)}, lambda: 1 / 0)  # type: ignore[arg-type,return-value]
    with pytest.raises(BuildError, match="computing its expected outputs failed"):
        build_ensemble(broken, tmp_path)
    assert archive.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == [archive.name]


def test_bad_declaration_is_reported_before_anything_is_written(tmp_path: Path) -> None:
    ens = Ensemble("unused", max_batch_size=4)
    ens.input("X", "FP32", [4])
    with pytest.raises(DeclarationError, match="has no steps"):
        build_ensemble(ens, tmp_path / "dist")
    assert not (tmp_path / "dist").exists()


def test_local_target_runs_gpu_instance_groups_on_cpu(tmp_path: Path) -> None:
    ens = Ensemble("gpu", max_batch_size=4)
    step = PythonStep("s", basic_steps.double, inputs=[Tensor("x", "FP32", [4])], outputs=[Tensor("y", "FP32", [4])],
                      max_batch_size=4, instance_group=InstanceGroup("KIND_GPU", 2))
    ens.output("Y", step(ens.input("X", "FP32", [4])))
    prod = render_repository(ens, "production", "24.10")
    local = render_repository(ens, "local", "24.10")
    assert b"KIND_GPU" in prod.files["gpu__s/config.pbtxt"]  # type: ignore[operator]
    assert b"KIND_CPU" in local.files["gpu__s/config.pbtxt"]  # type: ignore[operator]
    assert local.manifest["notes"] == ["gpu__s: KIND_GPU instance groups run as KIND_CPU on the local target"]


class TestRelease:
    @pytest.mark.parametrize(("release", "python"), [("23.02", "3.8"), ("23.04", "3.8"), ("23.05", "3.10"),
                                                     ("24.10", "3.10"), ("24.11", "3.12"), ("25.09", "3.12")])
    def test_stub_python(self, release: str, python: str) -> None:
        assert Release.of(release).stub_python == python

    @pytest.mark.parametrize("bad", ["24.13", "2410", "v24.10", "22.12"])
    def test_bad_releases(self, bad: str) -> None:
        with pytest.raises(BuildError, match="release"):
            Release.of(bad)

    def test_tensorflow_backend_gone_from_25_03(self) -> None:
        assert Release.of("25.02").has_tensorflow and not Release.of("25.03").has_tensorflow

    def test_image(self) -> None:
        from conch.sagemaker.images import triton_image

        assert triton_image("24.10", "us-east-1") == (
            "785573368785.dkr.ecr.us-east-1.amazonaws.com/sagemaker-tritonserver:24.10-py3"
        )


def test_a_file_that_vanishes_before_the_archive_is_written_is_named(tmp_path: Path) -> None:
    import io

    from conch.builder.archive import write_tar

    with pytest.raises(BuildError, match=r"file .*gone.bin \(for m/1/files/gone.bin\) does not exist"):
        write_tar({"m/1/files/gone.bin": tmp_path / "gone.bin"}, io.BytesIO())


def test_an_execution_env_path_parameter_beside_env_is_refused() -> None:
    from conch import PythonEnv

    ens = Ensemble("env_param", max_batch_size=4)
    s = PythonStep("s", basic_steps.double, inputs=[Tensor("x", "FP32", [4])],
                   outputs=[Tensor("y", "FP32", [4])], max_batch_size=4,
                   env=PythonEnv(requirements=("tabulate==0.9.0",)),
                   parameters={"EXECUTION_ENV_PATH": "$$TRITON_MODEL_DIRECTORY/env.tar.gz"})
    ens.output("Y", s(ens.input("X", "FP32", [4])))
    with pytest.raises(BuildError, match=r"model 'env_param__s': set its environment with env=, not an "
                                         r"EXECUTION_ENV_PATH parameter"):
        render_repository(ens, "production", "24.10")


def test_discovery_refuses_what_it_cannot_import_as_ensembles(tmp_path: Path) -> None:
    from conch import ConchError
    from conch.builder.discover import discover

    (tmp_path / "notes.txt").write_text("not python")
    with pytest.raises(ConchError, match=r"notes.txt: expected a .py file or a folder of them"):
        discover([tmp_path / "notes.txt"])
    (tmp_path / "json.py").write_text("x = 1\n")  # shadows a module this process imported already
    with pytest.raises(ConchError, match=r"json.py: a different module named 'json' is already imported .*rename "
                                         r"the file"):
        discover([tmp_path / "json.py"])
    assert str(tmp_path.resolve()) not in sys.path  # a refused file's folder would shadow `json` for later imports


def _filled(value: float) -> dict[str, np.ndarray]:
    return {"Z": np.full((2, 4), value, np.float32)}


def _expected_of(ens: Ensemble, sample: str) -> np.ndarray:
    record = next(s for s in render_repository(ens, "production", "24.10").record.samples if s.name == sample)
    return decode_array(record.expected["Z"])


def test_expected_outputs_of_code_without_a_source_file_follow_every_edit() -> None:
    """A function defined where conch cannot read its source (a notebook cell, `python -c`) is computed on
    every build: a remembered value would outlive an edit of the function."""
    for value in (2.0, 3.0):  # the same name, the same sample, an edited body
        namespace: dict[str, object] = {"np": np}
        exec(compile(f"def expected():\n    return {{'Z': np.full((2, 4), {value}, np.float32)}}\n",
                     "<notebook cell>", "exec"), namespace)
        ens = linear_ensemble("notebook_expected")
        ens.sample("edited", {"X": np.zeros((2, 4), np.float32)}, namespace["expected"])
        np.testing.assert_array_equal(_expected_of(ens, "edited"), np.full((2, 4), value, np.float32))


def test_expected_outputs_of_a_partial_follow_its_bound_arguments() -> None:
    """functools.partial(f, 3.0): the bound value is part of what the expected outputs are remembered by."""
    for value in (2.0, 3.0, np.float32(4.0)):  # plain values are keyed; a numpy scalar is computed each time
        ens = linear_ensemble("partial_expected")
        ens.sample("bound", {"X": np.zeros((2, 4), np.float32)}, functools.partial(_filled, value))
        np.testing.assert_array_equal(_expected_of(ens, "bound"), np.full((2, 4), value, np.float32))


def test_a_check_that_passed_is_not_run_again_unless_refreshing(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A step's build-time checks that passed for the same declaration, files and release are remembered; a
    refreshing build (`conch build --refresh`) runs them again."""
    monkeypatch.setenv("CONCH_CACHE_DIR", str(tmp_path / "cache"))
    checked: list[str] = []
    real = PythonStep.check
    monkeypatch.setattr(PythonStep, "check", lambda self, release: (checked.append(self.name), real(self, release))[1])
    ens = linear_ensemble("rechecked")
    render_repository(ens, "local", "24.10")
    assert sorted(checked) == ["add_one", "double"]
    render_repository(ens, "local", "24.10")
    assert len(checked) == 2  # remembered
    render_repository(ens, "local", "24.10", refresh=True)
    assert sorted(checked[2:]) == ["add_one", "double"]
