"""invoke_endpoint with TargetModel: what reaches a SageMaker-compatible server (moto), and the same request
bodies and response parsing proven on the real tritonserver's SageMaker front end."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import Any

import basic_steps
import httpx
import numpy as np
import pytest
from conftest import ACCOUNT, REGION, Moto, half_ensemble, linear_ensemble

from conch import DeployError, Ensemble, PythonStep, Tensor
from conch.archive.extract import safe_extract
from conch.aws import AwsTarget
from conch.builder.repository_build import build_ensemble
from conch.sagemaker.runtime import invoke, invoke_raw, replay_endpoint, request_body
from conch.triton.mme import MultiModelClient
from conch.triton.mme_contract import model_hash
from conch.triton.server import LocalTriton
from conch.wire import MAX_BODY_BYTES, TARGET_HEADER

pytestmark = pytest.mark.integration

X = np.arange(8, dtype=np.float32).reshape(2, 4)


def _received_by_moto() -> list[dict[str, Any]]:
    """The requests moto's sagemaker-runtime answered (it runs in this process): the x-amzn-sagemaker-*
    headers, Accept and the body of each. (moto 5.2 files them under endpoint None: it does not read the
    name from the /endpoints/<name>/invocations path.)"""
    from moto.sagemakerruntime.models import sagemakerruntime_backends

    backend = sagemakerruntime_backends[ACCOUNT][REGION]
    return [json.loads(base64.b64decode(key)) for answered in backend.results.values() for key in answered]


def test_invoke_sends_the_target_model_and_the_kserve_body(moto: Moto) -> None:
    body, content_type = request_body({"X": X}, "json")
    answer, _ = invoke_raw(moto.aws, "text-mme", "linear_a.tar.gz", body, content_type)

    (sent,) = moto.called("InvokeEndpoint")
    assert sent == {"EndpointName": "text-mme", "TargetModel": "linear_a.tar.gz", "ContentType": "application/json",
                    "Body": body}
    (received,) = _received_by_moto()
    headers = {k.lower(): v for k, v in received.items()}
    assert headers["x-amzn-sagemaker-target-model"] == "linear_a.tar.gz"
    assert json.loads(received["Body"]) == {
        "inputs": [{"name": "X", "shape": [2, 4], "datatype": "FP32", "data": X.ravel().tolist()}]
    }
    assert isinstance(answer, bytes)  # what comes back is moto's, not Triton's: the request is what is proven


def test_an_answer_that_is_not_a_triton_response_is_reported(moto: Moto, tmp_path: Path) -> None:
    with pytest.raises(DeployError, match=r"'linear_a.tar.gz' on endpoint 'text-mme': the answer is not a KServe v2 "
                       r"JSON inference response"):
        invoke(moto.aws, "text-mme", "linear_a.tar.gz", {"X": X})
    archive = build_ensemble(linear_ensemble("linear_a"), tmp_path, "production")
    report = replay_endpoint(moto.aws, "text-mme", archive, bodies=("json",))
    (row,) = report.rows
    assert not row.passed and row.endpoint == "text-mme (json)" and "not a KServe v2" in row.detail


def test_a_body_over_the_invocation_limit_is_refused_before_sending(moto: Moto) -> None:
    big = np.zeros((MAX_BODY_BYTES // 16 + 1, 4), np.float32)
    with pytest.raises(DeployError, match=r"SageMaker real-time invocations take at most 6.3 MB: send fewer rows"):
        invoke(moto.aws, "text-mme", "linear_a.tar.gz", {"X": big}, body="binary")
    assert not moto.called("InvokeEndpoint")


class TritonBehindSageMaker:
    """What SageMaker does with ``invoke_endpoint`` on an MME, with the real tritonserver as the container:
    the body, its ContentType and the TargetModel go to ``/models/<hash>/invoke``; an error status comes
    back as botocore's ModelError with the original status and message."""

    def __init__(self, triton: LocalTriton) -> None:
        self.url = triton.sagemaker_url

    def invoke_endpoint(self, EndpointName: str, TargetModel: str, ContentType: str, Body: bytes) -> dict[str, Any]:
        from botocore.exceptions import ClientError

        response = httpx.post(f"{self.url}/models/{model_hash(TargetModel)}/invoke", content=Body, timeout=60,
                              headers={"Content-Type": ContentType, TARGET_HEADER: TargetModel})
        if response.status_code != 200:
            error = {"Error": {"Code": "ModelError", "Message": "Received client error from primary"},
                     "OriginalStatusCode": response.status_code, "OriginalMessage": response.text}
            raise ClientError(error, "InvokeEndpoint")  # type: ignore[arg-type]
        return {"Body": io.BytesIO(response.content), "ContentType": response.headers.get("Content-Type", "")}


def _load(triton: LocalTriton, client: MultiModelClient, archive: Path) -> None:
    folder = triton.workdir / "models" / f"sm-{archive.name.removesuffix('.tar.gz')}"
    safe_extract(archive, folder)
    client.load(archive.name, folder, timeout=120)


def test_both_bodies_replay_green_on_the_real_triton_front_end(tmp_path: Path, triton: LocalTriton) -> None:
    texts = Ensemble("sm_upper", max_batch_size=4)
    step = PythonStep("upper", basic_steps.upper, inputs=[Tensor("TEXT", "BYTES", [1])],
                      outputs=[Tensor("UPPER", "BYTES", [1])],
                      max_batch_size=4)
    texts.output("UPPER", step(texts.input("TEXT", "BYTES", [1])))
    words = ["abc", "ünïcödé ✓", ""]
    texts.sample("words", {"TEXT": [[w] for w in words]}, {"UPPER": [[w.encode().upper()] for w in words]})
    archives = [build_ensemble(e, tmp_path, "local") for e in (linear_ensemble("sm_linear"), texts)]
    client = MultiModelClient(triton.sagemaker_url, triton.http_url)
    for archive in archives:
        _load(triton, client, archive)

    runtime = TritonBehindSageMaker(triton)
    aws = AwsTarget(REGION)  # never used to make a client: the runtime is given
    for archive in archives:
        report = replay_endpoint(aws, "local", archive, runtime=runtime)
        assert report.passed, report.table()
        assert [r.endpoint for r in report.rows] == ["local (json)", "local (binary)"]
    got = invoke(aws, "local", "sm_linear.tar.gz", {"X": X}, body="binary", runtime=runtime)
    np.testing.assert_array_equal(got["Z"], X * 2 + 1)


def test_a_triton_error_comes_back_with_its_status_and_message(tmp_path: Path, triton: LocalTriton) -> None:
    archive = build_ensemble(linear_ensemble("sm_errors"), tmp_path, "local")
    _load(triton, MultiModelClient(triton.sagemaker_url, triton.http_url), archive)
    with pytest.raises(DeployError) as error:
        invoke(AwsTarget(REGION), "local", "sm_errors.tar.gz", {"WRONG": X}, runtime=TritonBehindSageMaker(triton))
    message = str(error.value)
    assert message.startswith("'sm_errors.tar.gz' on endpoint 'local': Triton answered HTTP 400")
    assert "WRONG" in message and "/aws/sagemaker/Endpoints/local" in message


def test_a_real_triton_answer_relayed_by_the_server_replays_green(
    moto: Moto, tmp_path: Path, triton: LocalTriton
) -> None:
    archive = build_ensemble(linear_ensemble("sm_relay"), tmp_path, "local")
    _load(triton, MultiModelClient(triton.sagemaker_url, triton.http_url), archive)
    body, content_type = request_body({"X": X}, "json")
    answer = TritonBehindSageMaker(triton).invoke_endpoint("-", "sm_relay.tar.gz", content_type, body)
    # moto answers invoke_endpoint from a queue it is given; give it Triton's real answer to this sample.
    results = {"account_id": ACCOUNT, "region": REGION,
               "results": [{"Body": answer["Body"].read().decode(), "ContentType": answer["ContentType"]}]}
    httpx.post(f"{moto.url}/moto-api/static/sagemaker/endpoint-results", json=results, timeout=10)

    report = replay_endpoint(moto.aws, "text-mme", archive, bodies=("json",))
    assert report.passed, report.table()
    assert moto.called("InvokeEndpoint")[0]["TargetModel"] == "sm_relay.tar.gz"


def test_unknown_body_kinds_and_files_that_are_not_archives_are_refused(tmp_path: Path) -> None:
    from conch.sagemaker.runtime import archive_manifest

    with pytest.raises(DeployError, match=r"body 'xml': use json or binary"):
        request_body({"X": X}, "xml")
    (tmp_path / "notes.tar.gz").write_bytes(b"plain text, not gzip")
    with pytest.raises(DeployError, match=r"notes.tar.gz: not an archive with a conch-manifest.json; build it with"):
        archive_manifest(tmp_path / "notes.tar.gz")


def test_a_json_body_that_is_not_a_kserve_request_is_refused_naming_the_file(tmp_path: Path) -> None:
    from conch.sagemaker.runtime import read_json_body

    good = tmp_path / "good.json"
    good.write_text('{"inputs": [{"name": "X", "shape": [1], "datatype": "FP32", "data": [1.0]}]}')
    assert read_json_body(good) == good.read_bytes()
    (tmp_path / "rows.json").write_text('[{"X": 1}]')
    with pytest.raises(DeployError, match=r"--request .*rows.json: not a KServe v2 request body \(no 'inputs' list\)"):
        read_json_body(tmp_path / "rows.json")
    with pytest.raises(DeployError, match=r"--request .*absent.json: not a KServe v2 request body"):
        read_json_body(tmp_path / "absent.json")


def test_fp16_marks_the_json_row_not_applicable_on_the_real_triton_front_end(tmp_path: Path,
                                                                              triton: LocalTriton) -> None:
    archive = build_ensemble(half_ensemble("sm_halves"), tmp_path, "local")
    _load(triton, MultiModelClient(triton.sagemaker_url, triton.http_url), archive)
    report = replay_endpoint(AwsTarget(REGION), "local", archive, runtime=TritonBehindSageMaker(triton))
    assert report.passed, report.table()
    assert [(r.endpoint, r.result) for r in report.rows] == [("local (json)", "n/a"), ("local (binary)", "ok")]
    assert report.rows[0].detail.startswith("not applicable: input 'X' is FP16, output 'Y' is FP16")
