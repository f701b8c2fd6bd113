"""SageMaker's limits on the local MME, as boto3's sagemaker-runtime client sees them: an endpoint name of the
caller's choosing (others are unknown endpoints), ModelNotReadyException (HTTP 429) for a TargetModel still
loading past the load wait, and SageMaker's timeout ModelError for an invocation not answered in time. The limits
are small here (SageMaker's are 60 s each); the assertions are on what the client gets, not on timing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import mme_steps
import numpy as np
import pytest
import slow_steps
from botocore.exceptions import ClientError
from conftest import linear_ensemble
from mme_archives import EXPECTED, X, copies, runtime
from test_mme_bad_input import one_step

from conch.builder.repository_build import build_ensemble
from conch.endpoint import LocalMME
from conch.wire import json_request

pytestmark = pytest.mark.integration
NAME = "prod-embeddings"


@pytest.fixture(scope="module")
def mme(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalMME]:
    root = tmp_path_factory.mktemp("limits")
    source = root / "source"
    copies(build_ensemble(linear_ensemble("limits"), root / "built", "local"), source, ["good.tar.gz"])
    build_ensemble(one_step("slow", slow_steps.SlowAnswer), source, "local")
    with LocalMME(source, endpoint_name=NAME, invocation_timeout=4, load_wait=2, load_timeout=120) as endpoint:
        endpoint.load("good.tar.gz")  # loaded up front: the small limits apply to the calls below only
        endpoint.load("slow.tar.gz")
        yield endpoint


def call(url: str, target_model: str, endpoint: str = NAME) -> bytes:
    body, content_type = json_request({"X": X})
    answer = runtime(url).invoke_endpoint(EndpointName=endpoint, TargetModel=target_model, ContentType=content_type,
                                          Body=body)
    data: bytes = answer["Body"].read()
    return data


def test_boto3_code_written_for_a_real_endpoint_name_runs_unchanged(mme: LocalMME) -> None:
    import json

    out = json.loads(call(mme.url, "good.tar.gz"))["outputs"][0]
    np.testing.assert_array_equal(np.array(out["data"], dtype=np.float32).reshape(out["shape"]), EXPECTED)
    with pytest.raises(ClientError) as other:
        call(mme.url, "good.tar.gz", endpoint="local")
    assert other.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert other.value.response["Error"]["Code"] == "ValidationError"
    assert other.value.response["Error"]["Message"].startswith("Endpoint local of account local not found.")


def test_a_target_model_still_loading_past_the_wait_is_model_not_ready(tmp_path: Path) -> None:
    # an endpoint of its own: the hanging load holds one of Triton's SageMaker threads until it times out, and an
    # invocation whose kept-alive connection that thread serves waits as long (Triton 2.51 loads synchronously on
    # the thread that got the load; docs/fidelity.md), so the module's endpoint is kept out of it
    build_ensemble(one_step("hangs", mme_steps.HangingSetup), tmp_path, "local")
    with LocalMME(tmp_path, endpoint_name=NAME, invocation_timeout=4, load_wait=2, load_timeout=120) as mme:
        rt = runtime(mme.url)
        body, content_type = json_request({"X": X})
        with pytest.raises(rt.exceptions.ModelNotReadyException) as caught:  # botocore's own class for it
            rt.invoke_endpoint(EndpointName=NAME, TargetModel="hangs.tar.gz", ContentType=content_type, Body=body)
        assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 429
        assert "TargetModel 'hangs.tar.gz' is still downloading or loading" in caught.value.response["Error"][
            "Message"]
        assert mme.metrics_json()["ModelNotReady"] >= 1
        assert httpx.get(f"{mme.url}/ping", timeout=60).status_code == 200  # the front serves on meanwhile


def test_an_invocation_not_answered_in_time_gets_sagemakers_timeout_error(mme: LocalMME) -> None:
    rt = runtime(mme.url)
    body, content_type = json_request({"X": X})
    with pytest.raises(rt.exceptions.ModelError) as caught:
        rt.invoke_endpoint(EndpointName=NAME, TargetModel="slow.tar.gz", ContentType=content_type, Body=body)
    response = caught.value.response
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 424 and response["OriginalStatusCode"] == 0
    assert response["Error"]["Message"].startswith("Received server error (0) from primary with message \"Your "
                                                   "invocation timed out while waiting for a response from container")
    assert "TargetModel 'slow.tar.gz'" in response["Error"]["Message"]
    assert mme.metrics_json()["InvocationTimeouts"] == 1
    call(mme.url, "good.tar.gz")


def test_limits_of_zero_and_endpoint_names_sagemaker_refuses_are_refused(tmp_path: Path) -> None:
    from conch import ServeError

    with pytest.raises(ServeError, match=r"load_wait 0: give a number of seconds above 0 \(SageMaker's is 60\)"):
        LocalMME(tmp_path, load_wait=0)
    with pytest.raises(ServeError, match=r"endpoint name 'my_endpoint': SageMaker takes 1 to 63 letters"):
        LocalMME(tmp_path, endpoint_name="my_endpoint")
