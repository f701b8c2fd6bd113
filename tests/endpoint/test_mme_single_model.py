"""Single-model archives behind the local MME, through boto3's real sagemaker-runtime client and a real
tritonserver: one model folder, or a config.pbtxt at the root, each served as its TargetModel; one model under
several TargetModels (seed 000 copies one BERT under 200 names) loads side by side without a collision."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from mme_archives import copies, runtime
from seed_archives import pack_repo
from single_models import ADD_SUB_INPUTS, add_sub_repo

from conch.endpoint import LocalMME
from conch.wire import json_request

pytestmark = pytest.mark.integration


def invoke_add_sub(rt: object, target_model: str) -> dict[str, np.ndarray]:
    body, content_type = json_request(ADD_SUB_INPUTS)
    response = rt.invoke_endpoint(EndpointName="local", TargetModel=target_model,  # type: ignore[attr-defined]
                                  ContentType=content_type, Body=body)
    return {o["name"]: np.array(o["data"], np.float32) for o in json.loads(response["Body"].read())["outputs"]}


def test_single_model_archives_are_served_to_boto3(tmp_path: Path) -> None:
    source = tmp_path / "source"
    single = pack_repo(add_sub_repo(), tmp_path / "add_sub.tar.gz")
    copies(single, source, ["bert-a.tar.gz", "bert-b.tar.gz"])
    pack_repo(add_sub_repo(""), source / "root.tar.gz")
    a, b = ADD_SUB_INPUTS["INPUT0"], ADD_SUB_INPUTS["INPUT1"]
    with LocalMME(source) as mme:
        rt = runtime(mme.url)
        for name in ("bert-a.tar.gz", "bert-b.tar.gz", "root.tar.gz"):
            got = invoke_add_sub(rt, name)
            np.testing.assert_array_equal(got["OUTPUT0"], a + b)
            np.testing.assert_array_equal(got["OUTPUT1"], a - b)
        metrics = mme.metrics_json()
    assert metrics["loaded"] == ["bert-a.tar.gz", "bert-b.tar.gz", "root.tar.gz"]
    assert metrics["StepNameCollisions"] == 0
