"""Declaring environments: what PythonEnv accepts and refuses, before anything is packed."""

from __future__ import annotations

from pathlib import Path

import pytest

from conch import DeclarationError, PythonEnv


def test_exactly_one_source() -> None:
    with pytest.raises(DeclarationError, match="exactly one of"):
        PythonEnv()
    with pytest.raises(DeclarationError, match="exactly one of"):
        PythonEnv(requirements=("tabulate",), conda_prefix=Path("/opt/env"))


@pytest.mark.parametrize("bad", ["git+https://example.invalid/x.git", "./local_pkg", "-e .", "tabulate=="])
def test_requirements_must_be_named(bad: str) -> None:
    with pytest.raises(DeclarationError, match="requirement"):
        PythonEnv(requirements=(bad,))


@pytest.mark.parametrize("name", ["env.tar.xz", "env.txz"])
def test_tar_xz_is_refused_with_the_reason(name: str) -> None:
    with pytest.raises(DeclarationError, match=r"cannot use \.tar\.xz.*repack it as \.tar\.gz"):
        PythonEnv(archive=Path(name))


def test_requirements_file_with_comments_and_includes(tmp_path: Path) -> None:
    (tmp_path / "base.txt").write_text("numpy<2  # the stub needs numpy 1\n")
    (tmp_path / "requirements.txt").write_text("# tokenizer\ntokenizers>=0.19\n\n-r base.txt\n")
    env = PythonEnv.from_requirements_file(tmp_path / "requirements.txt", unpacked=True)
    assert env.requirements == ("tokenizers>=0.19", "numpy<2") and env.unpacked


def test_missing_requirements_file(tmp_path: Path) -> None:
    with pytest.raises(DeclarationError, match="does not exist"):
        PythonEnv.from_requirements_file(tmp_path / "nope.txt")


def test_equal_declarations_are_one_environment() -> None:
    assert PythonEnv(requirements=("a", "b")) == PythonEnv(requirements=["a", "b"])  # type: ignore[arg-type]
    assert len({PythonEnv(requirements=("a",)), PythonEnv(requirements=("a",))}) == 1


def test_the_writer_and_the_reader_name_one_environment_folder() -> None:
    """The builder places packed environments under the folder the archive reader skips as not a model."""
    from conch.archive import verify
    from conch.ensembles import environment

    assert environment.ENV_DIR == verify.ENV_DIR == "conch-envs"


@pytest.mark.parametrize("req", ["tokenizers>=0.19,<1", "numpy", "onnxruntime==1.20.1", "a[b,c]>=1 , <2", "x~=1.2",
                                 "A.b-c_d==0", "x~=1", "numpy>=>1", "x>=1.*", "x==1.0.*", "foo bar", "x[", "x>=1,",
                                 ".x", "x-", "x; python_version<'3.12'", "x @ https://h/x.whl"])
def test_a_requirement_is_taken_when_packaging_accepts_it(req: str) -> None:
    """PythonEnv takes what packaging reads as a requirement and refuses, naming it, what packaging refuses."""
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        Requirement(req)
    except InvalidRequirement:
        refused = r"PythonEnv requirement .*(is not a valid requirement|only named requirements)"
        with pytest.raises(DeclarationError, match=refused):
            PythonEnv(requirements=(req,))
    else:
        assert PythonEnv(requirements=(req,)).requirements == (req.strip(),)
