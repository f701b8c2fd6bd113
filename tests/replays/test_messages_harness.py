"""The harness's refusals, each triggered for real and asserted on its message: load stages, sample-less
archives, the local MME's options and answers, an S3 source without the object, a profile's payload and
warm-up, and a build for SageMaker given to the local profiler."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import basic_steps
import pytest
from conftest import REFUSED_URL

from conch import Ensemble, PythonStep, Tensor
from conch.archive.manifest import read_manifest
from conch.builder.repository_build import build_ensemble
from conch.cli import main
from conch.endpoint import LocalMME
from conch.endpoint.protocol import ValidationError, model_error
from conch.endpoint.sources import open_source
from conch.ensembles.payloads import check_json_request
from conch.errors import BenchError, ServeError
from conch.perf.load.spec import archive_requests
from conch.perf.load.stages import parse_stages


def test_stages_must_be_a_non_empty_list() -> None:
    with pytest.raises(BenchError, match=re.escape("stages: expected a non-empty JSON list of {duration, users, "
                                                   "spawn_rate}")):
        parse_stages("[]")


def test_a_stage_without_users_names_the_keys_it_needs() -> None:
    with pytest.raises(BenchError, match=re.escape("stage 2: expected keys duration, users (and spawn_rate), got "
                                                   "{'duration': 20}")):
        parse_stages(json.dumps([{"duration": 10, "users": 2}, {"duration": 20}]))


def test_stage_durations_count_from_the_start(tmp_path: Path) -> None:
    stages = tmp_path / "stages.json"
    stages.write_text(json.dumps([{"duration": 30, "users": 2}, {"duration": 10, "users": 4}]))
    with pytest.raises(BenchError, match=re.escape("stage 2: duration 10 must be later than 30 (durations count "
                                                   "from the start of the test, as in seed 003's list)")):
        parse_stages(str(stages))


def test_a_body_that_is_not_json_says_so() -> None:
    with pytest.raises(ValueError, match=r"^not JSON: Expecting "):
        check_json_request(b"{inputs")


def doubling(name: str) -> Ensemble:
    ens = Ensemble(name, max_batch_size=4)
    step = PythonStep("double", basic_steps.double, inputs=[Tensor("x", "FP32", [4])],
                      outputs=[Tensor("y", "FP32", [4])],
                      max_batch_size=4)
    ens.output("Y", step(ens.input("X", "FP32", [4])))
    return ens


def test_an_archive_without_samples_has_nothing_to_send(tmp_path: Path) -> None:
    archive = build_ensemble(doubling("no_samples"), tmp_path, "local")
    with pytest.raises(BenchError, match=re.escape("no_samples.tar.gz has no sample payloads to send; declare one "
                                                   "with ensemble.sample(...)")):
        archive_requests(archive)


def test_a_local_mme_must_fit_one_model(tmp_path: Path) -> None:
    with pytest.raises(ServeError, match=re.escape("max_loaded 0: at least one model must fit")):
        LocalMME(tmp_path, max_loaded=0)


def test_a_local_mme_names_the_step_name_choices(tmp_path: Path) -> None:
    with pytest.raises(ServeError, match=re.escape("step_names 'rename': choose 'shared' or 'isolate'")):
        LocalMME(tmp_path, step_names="rename")


def test_an_s3_source_needs_a_bucket() -> None:
    with pytest.raises(ServeError, match=re.escape("s3:///models: name a bucket, e.g. s3://my-bucket/models/")):
        open_source("s3:///models")


def test_a_call_to_another_endpoint_name_gets_sagemakers_answer_and_the_fix() -> None:
    from conch.endpoint.app import invoke

    async def no_body() -> dict[str, object]:
        raise AssertionError("refused before the body is read")

    with pytest.raises(ValidationError, match=re.escape(
        "Endpoint prod of account local not found. This local MME serves endpoint 'local-mme': call it with "
        "EndpointName='local-mme' (conch serve --endpoint-name sets it)"
    )):
        asyncio.run(invoke(None, "local-mme", "prod", [], no_body))  # type: ignore[arg-type]  # refused before use


@pytest.mark.parametrize(("status", "side"), [(400, "client"), (500, "server")])
def test_tritons_error_answer_is_sagemakers_model_error(status: int, side: str) -> None:
    error = model_error("a.tar.gz", status, "boom")
    assert str(error) == f"Received {side} error ({status}) from model 'a.tar.gz' with message 'boom'"
    assert (error.status, error.original_status, error.original_message) == (424, status, "boom")


def test_an_s3_source_without_the_object_is_sagemakers_download_failure(
    moto_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import boto3

    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(key, "testing")
    boto3.client("s3", endpoint_url=moto_server, region_name="us-east-1").create_bucket(Bucket="conch-messages")
    source = open_source("s3://conch-messages/models/", s3_endpoint_url=moto_server)
    with pytest.raises(ValidationError, match=re.escape(
        "Failed to download model data for TargetModel 'absent.tar.gz': there is no object at "
        "s3://conch-messages/models/absent.tar.gz. Upload the archive there (conch deploy) or check the TargetModel "
        "spelling"
    )):
        source.fetch("absent.tar.gz", tmp_path / "absent.tar.gz")


def test_a_profile_whose_warm_up_fails_names_the_ensemble_and_the_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    payload = tmp_path / "payload.json"
    payload.write_text(json.dumps({"inputs": [{"name": "X", "shape": [1, 4], "datatype": "FP32",
                                               "data": [1, 2, 3, 4]}]}))
    code = main(["profile", "--url", REFUSED_URL, "--payload", str(payload), "--model", "linear"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"conch: error: ensemble 'linear' on {REFUSED_URL}: the warm-up request failed: " in err


def test_a_profile_payload_that_is_not_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    payload = tmp_path / "payload.json"
    payload.write_text("{inputs")
    code = main(["profile", "--url", REFUSED_URL, "--payload", str(payload), "--model", "linear"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"conch: error: --payload {payload}: not a KServe v2 JSON request (not JSON: Expecting " in err


def test_the_local_profiler_refuses_a_sagemaker_build_it_cannot_load(tmp_path: Path) -> None:
    import onnx_models

    from conch import OnnxStep
    from conch.replays.local_replay import check_backends

    model = onnx_models.affine(tmp_path / "affine.onnx")
    ens = Ensemble("affine_gpu", max_batch_size=4)
    step = OnnxStep("affine", model, max_batch_size=4)
    ens.output("Y", step(ens.input("X", "FP32", [4])))
    archive = build_ensemble(ens, tmp_path, "production")
    with pytest.raises(ServeError, match=re.escape(
        "affine_gpu.tar.gz is a production build whose steps affine_gpu__affine (onnxruntime_onnx) need "
        "backends the local server lacks; profile a `conch build --target local` build"
    )):
        check_backends(archive, read_manifest(archive), {}, "profile")


def first_call_while_tritonserver_is_down(folder: Path, why: str, *, gone: bool) -> None:
    """A first invocation of an archive of ``folder`` on a fleet whose tritonserver exited (``gone``: for good)."""
    from conch.endpoint.disk import DiskCache
    from conch.endpoint.fleet import Budgets, Fleet
    from conch.endpoint.hop import TritonHop
    from conch.endpoint.metrics import Metrics

    async def call() -> None:
        hop = TritonHop(REFUSED_URL)
        fleet = Fleet(open_source(folder), DiskCache(folder / "cache"), hop, Metrics(), Budgets(), lambda: 0)
        try:
            await (fleet.server_gone(why) if gone else fleet.server_lost(why))
            await fleet.acquire("doubling.tar.gz")
        finally:
            await hop.close()

    asyncio.run(call())


def test_a_load_after_tritonserver_is_gone_for_good_says_why(tmp_path: Path) -> None:
    from conch.endpoint.protocol import EndpointError

    build_ensemble(doubling("doubling"), tmp_path, "local")
    with pytest.raises(EndpointError, match=re.escape(
        "TargetModel 'doubling.tar.gz' cannot load: tritonserver was killed by SIGKILL (no restarts left)"
    )):
        first_call_while_tritonserver_is_down(tmp_path, "was killed by SIGKILL (no restarts left)", gone=True)


def test_a_load_waiting_for_a_restart_that_never_comes_points_at_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from conch.endpoint import fleet
    from conch.endpoint.protocol import EndpointError

    monkeypatch.setattr(fleet, "WAIT_FOR_SERVER_S", 0.2)  # the real wait is 180 s of a restart
    build_ensemble(doubling("doubling"), tmp_path, "local")
    with pytest.raises(EndpointError, match=re.escape(
        "TargetModel 'doubling.tar.gz' cannot load: tritonserver was killed by SIGSEGV and is not back after 0.2 s "
        "of restarting; see the endpoint's log"
    )):
        first_call_while_tritonserver_is_down(tmp_path, "was killed by SIGSEGV", gone=False)


def test_a_profile_whose_measured_requests_all_fail_shows_one_of_the_errors(tmp_path: Path, triton: object) -> None:
    """The samples warm the model up; a payload naming an input the ensemble lacks then fails every request."""
    import numpy as np

    from conch.perf.profile.load import Body, Target
    from conch.perf.profile.local_servers import sample_bodies
    from conch.perf.profile.measure import Load, measure
    from conch.perf.profile.server_statistics import StatsEndpoint
    from conch.replays.local_replay import stage
    from conch.triton.mme import MultiModelClient
    from conch.triton.server import LocalTriton

    assert isinstance(triton, LocalTriton)
    ens = doubling("doubling_warm")
    ens.sample("s", {"X": np.ones((1, 4), np.float32)}, {"Y": np.full((1, 4), 2, np.float32)})
    archive = build_ensemble(ens, tmp_path, "local")
    client = MultiModelClient(triton.sagemaker_url, triton.http_url)
    client.load(archive.name, stage(archive, triton), 120)
    wrong = Body(json.dumps({"inputs": [{"name": "NOPE", "shape": [1, 4], "datatype": "FP32",
                                         "data": [1, 2, 3, 4]}]}).encode())
    try:
        with pytest.raises(ServeError, match=re.escape(
            f"ensemble 'doubling_warm.tar.gz' on {triton.http_url}: every request failed, e.g. "
        )):
            measure(StatsEndpoint(triton.http_url), Target.kserve(triton.http_url, archive.name), archive.name,
                    Load((wrong,), "wrong.json", 3, 1), triton.http_url,
                    warmup=sample_bodies(read_manifest(archive)))
    finally:
        client.unload(archive.name)
