"""How conch's objects display in Jupyter: an Ensemble as its DAG (SVG through Graphviz; Mermaid and text where
Graphviz is missing), a run result and the Python API's reports as HTML tables with every value escaped."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import linear_ensemble

import conch
from conch.api import BuildReport, BuiltArchive, ReplayResult
from conch.verdicts import ReplayReport, ReplayRow


def test_an_ensemble_displays_as_svg_through_graphviz() -> None:
    ens = linear_ensemble("shown")
    bundle = ens._repr_mimebundle_()
    assert "<svg" in bundle["image/svg+xml"] and "add_one" in bundle["image/svg+xml"]
    assert bundle["text/plain"] == "<Ensemble 'shown': 2 steps>"
    assert ens._repr_svg_() == bundle["image/svg+xml"]


def test_without_graphviz_an_ensemble_displays_as_mermaid_and_text(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pygraphviz", None)  # as where the `graph` extra is not installed
    ens = linear_ensemble("unrendered")
    bundle = ens._repr_mimebundle_()
    assert "image/svg+xml" not in bundle and ens._repr_svg_() is None
    assert bundle["text/markdown"].startswith("```mermaid\nflowchart LR\n")
    assert bundle["text/plain"].splitlines() == [
        "ensemble unrendered (max_batch_size 8)",
        "  double | python | instances: default | max_batch_size 8",
        "  add_one | python | instances: default | max_batch_size 8",
        "  X -> double: X → x: FP32 [4]",
        "  double -> add_one: y: FP32 [4]",
        "  add_one -> Z: z → Z: FP32 [4]",
    ]


def test_a_run_result_shows_each_steps_tensors_as_an_escaped_table() -> None:
    ens = linear_ensemble("run_shown")
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    assert "not kept: run(..., intermediates=True) keeps them" in conch.run(ens, {"X": x})._repr_html_()
    result = conch.run(ens, {"X": x}, intermediates=True)
    page = result._repr_html_()
    assert "<td>double</td>" in page and "<td>add_one</td>" in page
    assert "<code>y</code> float32 [2, 4]: [0, 2, 4, 6, 8, 10, ...]" in page
    assert "<code>x</code> float32 [2, 4]: [0, 1, 2, 3, 4, 5, ...]" in page
    assert "<code>Z</code> float32 [2, 4]: [1, 3, 5, 7, 9, 11, ...]" in page
    result.steps[0].problems.append("<script>alert(1)</script> & more")
    page = result._repr_html_()
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt; &amp; more" in page


def test_reports_of_the_python_api_display_as_escaped_tables(tmp_path: Path) -> None:
    archive = tmp_path / "a<b>.tar.gz"
    archive.write_bytes(b"x" * 1234)
    built = BuildReport([BuiltArchive("a<b>", archive, "local", "24.09")])
    assert "<td>a&lt;b&gt;</td>" in built._repr_html_() and "<td>1,234</td>" in built._repr_html_()
    assert str(built) == f"a<b>: {archive} (1,234 bytes, local build for 24.09)"
    replayed = ReplayResult(ReplayReport([ReplayRow("e.tar.gz", "<s>", "kserve", False, "Z: max abs err 3\nmore"),
                                          ReplayRow("e.tar.gz", "s", "sagemaker-json", True, "n/a: FP16",
                                                    applicable=False)]))
    page = replayed._repr_html_()
    assert "<td>&lt;s&gt;</td>" in page and "Z: max abs err 3<br/>more" in page
    assert 'color:#cf222e">FAIL</b>' in page and "0 passed, 1 failed, 1 not applicable" in page
    assert not replayed.passed and str(replayed) == replayed.report.table()


def test_the_python_api_is_public() -> None:
    assert {"build", "replay", "serve", "BuildReport", "ReplayResult", "LocalEndpoint"} <= set(conch.__all__)
    assert conch.build is not None and conch.ReplayResult is ReplayResult
