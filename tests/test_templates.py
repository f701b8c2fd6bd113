"""conch.templates: compiled templates kept between runs where that is safe, rendered the same either way."""

from __future__ import annotations

import jinja2
import pytest

from conch import templates
from conch.compiler.pbtxt import render_config
from conch.ensembles.layout import ModelSpec, Platform
from conch.ensembles.tensors import Tensor

SPEC = ModelSpec("m", (Tensor("x", "FP32", [4]),), (Tensor("y", "FP32", [4]),), Platform.ONNXRUNTIME_ONNX)


def test_templates_render_the_same_when_no_bytecode_folder_can_be_made(monkeypatch: pytest.MonkeyPatch) -> None:
    """A temp folder jinja2 judges unsafe (another user's, wrong mode) costs only the compile, never the build."""
    expected = render_config(SPEC)

    def unsafe() -> None:
        raise RuntimeError("Cannot determine safe temp directory.  You need to explicitly provide one.")

    monkeypatch.setattr(jinja2, "FileSystemBytecodeCache", unsafe)
    assert templates._bytecode_cache() is None
    templates.environment.cache_clear()
    try:
        assert templates.environment().bytecode_cache is None
        assert render_config(SPEC) == expected
    finally:
        templates.environment.cache_clear()
