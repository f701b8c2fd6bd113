"""Model files given as bytes, paths, in-memory models or functions: resolved once, with clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from conch import BuildError
from conch.backends.artifact import Artifact


def test_a_function_is_called_once_and_its_result_kept(tmp_path: Path) -> None:
    calls = []
    path = tmp_path / "model.bin"
    path.write_bytes(b"weights")

    def produce() -> Path:
        calls.append(1)
        return path

    artifact = Artifact(produce, what="x step 's'", filename="model.bin")
    assert artifact.deferred
    assert artifact.resolve() == path and artifact.data() == b"weights" and artifact.resolve() == path
    assert calls == [1] and not artifact.deferred


def test_in_memory_models_are_serialized_before_being_taken_for_functions() -> None:
    class Model:
        def __call__(self) -> bytes:
            raise AssertionError("a model must not be called to produce its file")

    artifact = Artifact(Model(), what="x step 's'", filename="m", serialize=lambda v: b"serialized")
    assert not artifact.deferred and artifact.data() == b"serialized"


def test_errors_name_the_step_and_the_file(tmp_path: Path) -> None:
    with pytest.raises(BuildError, match=r"x step 's': model.bin file .*nope.bin does not exist"):
        Artifact(tmp_path / "nope.bin", what="x step 's'", filename="model.bin").resolve()

    def broken() -> bytes:
        raise RuntimeError("export failed")

    with pytest.raises(BuildError, match=r"x step 's': the function producing model.bin failed: RuntimeError: export"):
        Artifact(broken, what="x step 's'", filename="model.bin").resolve()
    with pytest.raises(BuildError, match=r"model.bin must be given as bytes, a file path, or a function"):
        Artifact(lambda: 42, what="x step 's'", filename="model.bin").resolve()
