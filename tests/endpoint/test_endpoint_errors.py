"""What the local MME answers when a call cannot be served: a body over SageMaker's limit, an archive
without a model folder, a load that stays out of memory, an S3 source that fails, a tritonserver that died,
a cache folder removed underneath it, a port already taken. Each answer names the TargetModel and the cause,
as SageMaker's does."""

from __future__ import annotations

import shutil
import socket
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mme_steps
import numpy as np
import pytest
from botocore.exceptions import ClientError
from conftest import REFUSED_URL, linear_ensemble
from mme_archives import EXPECTED, copies, invoke_linear, runtime, tar_with
from test_mme_bad_input import one_step

from conch import ServeError
from conch.builder.repository_build import build_ensemble
from conch.endpoint import LocalMME
from conch.endpoint.sources import S3Source
from conch.wire import MAX_BODY_BYTES

pytestmark = pytest.mark.integration
GOOD = ["good-0.tar.gz", "good-1.tar.gz", "good-2.tar.gz", "good-3.tar.gz"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("endpoint-errors")
    source = root / "source"
    copies(build_ensemble(linear_ensemble("good"), root / "built", "local"), source, GOOD)
    build_ensemble(one_step("oom", mme_steps.OutOfMemorySetup), source, "local")
    tar_with([(tarfile.TarInfo("README.txt"), b"only a file at the root\n")], source / "flat.tar.gz")
    return source


@pytest.fixture(scope="module")
def mme(folder: Path) -> Iterator[LocalMME]:
    with LocalMME(folder, max_loaded=4, load_timeout=60, step_names="isolate") as endpoint:  # GOOD: stamped copies
        yield endpoint


def error_of(url: str, target_model: str, body: bytes | None = None) -> dict[str, Any]:
    """The error SageMaker's runtime API answers, as boto3's client raises it."""
    with pytest.raises(ClientError) as caught:
        if body is None:
            invoke_linear(runtime(url), target_model)
        else:
            runtime(url).invoke_endpoint(EndpointName="local", TargetModel=target_model,
                                         ContentType="application/json", Body=body)
    response = caught.value.response
    return {"code": response["Error"]["Code"], "message": response["Error"]["Message"], **response}


def test_a_body_over_sagemakers_limit_is_refused_before_any_load(mme: LocalMME) -> None:
    error = error_of(mme.url, "big.tar.gz", b" " * (MAX_BODY_BYTES + 1))  # no such archive: never fetched
    assert error["code"] == "ValidationError"
    assert (f"TargetModel 'big.tar.gz': the request body is {MAX_BODY_BYTES + 1} bytes; SageMaker takes at most "
            f"{MAX_BODY_BYTES} bytes per invocation") in error["message"]


def test_an_archive_without_a_model_folder_is_refused(mme: LocalMME) -> None:
    error = error_of(mme.url, "flat.tar.gz")
    assert error["code"] == "ValidationError"
    assert "TargetModel 'flat.tar.gz': the archive holds no model folder at its root" in error["message"]


def test_a_load_still_out_of_memory_after_unloading_three_others_says_so(mme: LocalMME) -> None:
    rt = runtime(mme.url)
    for name in GOOD[:3]:
        np.testing.assert_array_equal(invoke_linear(rt, name), EXPECTED)
    error = error_of(mme.url, "oom.tar.gz")
    assert error["code"] == "ModelError" and error["OriginalStatusCode"] == 507
    assert ("TargetModel 'oom.tar.gz' failed to load: still out of memory (507) after unloading 3 other models"
            in error["message"])
    np.testing.assert_array_equal(invoke_linear(rt, GOOD[3]), EXPECTED)  # the endpoint still serves


def test_an_archive_s3_will_not_hand_out_names_the_object_and_s3s_reason(moto_server: str, folder: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """An archive moved to the GLACIER storage class: S3 lists it but refuses to read it until restored."""
    import boto3

    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(key, "testing")
    s3 = boto3.client("s3", endpoint_url=moto_server, region_name="us-east-1")
    s3.create_bucket(Bucket="conch-cold")
    s3.put_object(Bucket="conch-cold", Key="models/good-0.tar.gz", Body=(folder / GOOD[0]).read_bytes(),
                  StorageClass="GLACIER")
    with LocalMME("s3://conch-cold/models/", s3_endpoint_url=moto_server) as endpoint:
        error = error_of(endpoint.url, GOOD[0])
    assert error["ResponseMetadata"]["HTTPStatusCode"] >= 500, error
    assert ("TargetModel 'good-0.tar.gz': downloading s3://conch-cold/models/good-0.tar.gz for TargetModel "
            "'good-0.tar.gz': An error occurred (InvalidObjectState)") in error["message"]


def test_an_s3_server_that_cannot_be_reached_names_the_object(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(key, "testing")
    source = S3Source("models", "team/", REFUSED_URL)
    with pytest.raises(ServeError, match=r"downloading s3://models/team/x.tar.gz for TargetModel 'x.tar.gz': Could "
                                         r"not connect to the endpoint URL"):
        source.fetch("x.tar.gz", tmp_path / "x.tar.gz")


def test_a_cache_folder_removed_under_a_running_endpoint_is_an_internal_failure_naming_the_model(
        folder: Path, tmp_path: Path) -> None:
    with LocalMME(folder, cache_dir=tmp_path / "cache") as endpoint:
        np.testing.assert_array_equal(invoke_linear(runtime(endpoint.url), GOOD[0]), EXPECTED)
        shutil.rmtree(tmp_path / "cache")
        no_cache = error_of(endpoint.url, GOOD[2])
    assert f"TargetModel {GOOD[2]!r}: internal failure: FileNotFoundError" in no_cache["message"], no_cache


def test_after_tritonserver_dies_past_its_restarts_calls_say_it_is_gone(folder: Path, tmp_path: Path) -> None:
    with LocalMME(folder, cache_dir=tmp_path / "cache", max_restarts=0) as endpoint:
        np.testing.assert_array_equal(invoke_linear(runtime(endpoint.url), GOOD[0]), EXPECTED)
        endpoint.triton.stop()
        deadline = time.monotonic() + 60
        while endpoint.serving() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not endpoint.serving()
        loaded = error_of(endpoint.url, GOOD[0])  # counted loaded before the server went
        fresh = error_of(endpoint.url, GOOD[1])  # never loaded
    for name, error in ((GOOD[0], loaded), (GOOD[1], fresh)):
        assert f"{name!r}" in error["message"], error
        assert "was not restarted" in error["message"] and "--max-restarts 0" in error["message"], error


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # uvicorn's failed bind
def test_a_front_port_already_taken_is_named(folder: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        endpoint = LocalMME(folder, port=port)
        with pytest.raises(ServeError, match=rf"the local MME front did not start on 127.0.0.1:{port} "
                                             r"\(port taken\?\)"):
            endpoint.start()
        assert not endpoint.triton.running()


def test_loading_before_the_endpoint_started_says_how_to_start_it(folder: Path) -> None:
    with pytest.raises(ServeError, match=r"the local MME is not running: use it as a context manager or call "
                                         r"start\(\)"):
        LocalMME(folder).load(GOOD[0])
