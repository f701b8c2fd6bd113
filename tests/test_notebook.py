"""docs/notebook.ipynb runs from top to bottom on a real kernel (nbclient + ipykernel), so it cannot rot: declare,
run in process, build, replay on a local Triton, call a local MME with boto3; an Ensemble displays as SVG."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_the_docs_notebook_runs_and_shows_the_ensemble_as_svg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    for name in ("notebook.ipynb", "notebook_steps.py"):
        shutil.copy(DOCS / name, tmp_path / name)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(DOCS.parent), os.environ.get("PYTHONPATH", "")]))
    notebook = nbformat.read(tmp_path / "notebook.ipynb", as_version=4)
    nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    shown = [{key for output in cell.outputs for key in output.get("data", {})} for cell in code]
    declared = next(cell for cell in code if cell.source.rstrip().endswith("\ndemo"))
    (svg,) = [o["data"]["image/svg+xml"] for o in declared.outputs if "image/svg+xml" in o.get("data", {})]
    assert "<svg" in svg and "scale" in svg and "shift" in svg
    run, built, replayed, endpoint = (next(c for c in code if c.source.rstrip().endswith(f"\n{name}"))
                                      for name in ("result", "built", "replayed", "endpoint"))
    for cell in (run, built, replayed, endpoint):
        assert "text/html" in {key for o in cell.outputs for key in o.get("data", {})}
    run_html = next(o["data"]["text/html"] for o in run.outputs if "text/html" in o.get("data", {}))
    assert "<td>scale</td>" in run_html and "<code>y</code> float32 [1, 3]: [2, 4, 6]" in run_html
    replay_html = next(o["data"]["text/html"] for o in replayed.outputs if "text/html" in o.get("data", {}))
    assert "4 passed, 0 failed" in replay_html  # the load and three endpoints
    assert any("[3.0, 5.0, 7.0]" in str(o.get("data", {}).get("text/plain")) for o in code[-2].outputs), shown
