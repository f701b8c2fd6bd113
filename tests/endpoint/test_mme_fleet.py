"""Seed 000's pattern on the local MME: one archive uploaded under many names to a real S3-compatible server
(moto on 127.0.0.1), invoked in random order from several threads through boto3's sagemaker-runtime client,
with far fewer models allowed loaded than there are names. --step-names isolate gives each copy's steps names of
their own (what `conch deploy` uploads: stamped copies); the default --step-names shared keeps the archive's
names, as SageMaker's image does, and counts each copy sharing them as a collision."""

from __future__ import annotations

import random
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import boto3
import numpy as np
import pytest
from botocore.exceptions import ClientError
from conftest import linear_ensemble
from mme_archives import EXPECTED, invoke_linear, runtime

from conch.builder.repository_build import build_ensemble
from conch.endpoint import LocalMME

pytestmark = pytest.mark.integration
BUCKET = "conch-mme-fleet"
CALL_TRIES = 3
MAX_CRASHES = 2  # seen: none in three lone runs of the 200-names test, one when another heavy run shared the cores


@pytest.fixture(scope="module")
def linear_archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_ensemble(linear_ensemble("fleet"), tmp_path_factory.mktemp("built"), "local")


def upload(moto_server: str, archives: list[Path], prefix: str) -> list[str]:
    """Each archive uploaded under its own name, copy-NNN.tar.gz, as TargetModels under ``prefix``."""
    s3 = boto3.client("s3", endpoint_url=moto_server, region_name="us-east-1", aws_access_key_id="x",
                      aws_secret_access_key="x")
    s3.create_bucket(Bucket=BUCKET)
    names = [f"copy-{i:03d}.tar.gz" for i in range(len(archives))]
    for name, archive in zip(names, archives, strict=True):
        s3.put_object(Bucket=BUCKET, Key=f"{prefix}/{name}", Body=archive.read_bytes())
    return names


def run_fleet(moto_server: str, archives: list[Path], prefix: str, max_loaded: int, calls: int,
              step_names: str = "isolate") -> dict[str, Any]:
    names = upload(moto_server, archives, prefix)
    count = len(names)
    order = names + random.Random(7).choices(names, k=calls - count)  # every name at least once
    random.Random(11).shuffle(order)
    with LocalMME(f"s3://{BUCKET}/{prefix}", s3_endpoint_url=moto_server, max_loaded=max_loaded,
                  step_names=step_names) as mme:
        seen_loaded: list[int] = []
        done = threading.Event()

        def watch() -> None:  # LoadedModelCount as a client of /metrics.json sees it, while the calls run
            while not done.wait(0.2):
                seen_loaded.append(mme.metrics_json()["LoadedModelCount"])

        watcher = threading.Thread(target=watch)
        watcher.start()
        local = threading.local()
        cut_short: list[str] = []

        def call(name: str) -> tuple[str, Any]:
            """One call; asked again only when the endpoint says tritonserver died under it and was restarted
            (Triton 2.51 rarely segfaults even without shared step names; see the README's known limits)."""
            if not hasattr(local, "rt"):
                local.rt = runtime(mme.url)
            for _ in range(CALL_TRIES - 1):
                try:
                    return name, invoke_linear(local.rt, name)
                except ClientError as exc:
                    if "tritonserver exited while serving it" not in exc.response["Error"]["Message"]:
                        raise
                    cut_short.append(name)
            return name, invoke_linear(local.rt, name)

        try:
            with ThreadPoolExecutor(max_workers=4) as pool:
                answers = list(pool.map(call, order))
        finally:
            done.set()
            watcher.join()
        with pytest.raises(ClientError) as missing:
            invoke_linear(runtime(mme.url), "not-uploaded.tar.gz")
        metrics = mme.metrics_json()
    assert missing.value.response["Error"]["Code"] == "ValidationError"
    assert f"s3://{BUCKET}/{prefix}/not-uploaded.tar.gz" in missing.value.response["Error"]["Message"]
    assert len(answers) == calls
    for name, z in answers:
        np.testing.assert_array_equal(z, EXPECTED, err_msg=name)
    assert metrics["Invocations"]["2XX"] == calls and metrics["Invocations"]["4XX"] == 1 + len(cut_short)
    assert metrics["ModelDownloads"] == count  # each archive downloaded once; reloads came from the disk cache
    assert metrics["ModelLoads"]["cold"] == count and metrics["ModelLoads"]["reload"] > 0
    assert sum(metrics["ModelUnloads"].values()) >= count - max_loaded
    assert metrics["LoadedModelCountPeak"] <= max_loaded
    assert seen_loaded and max(seen_loaded) <= max_loaded
    assert metrics["TritonRestarts"] <= MAX_CRASHES and (not cut_short or metrics["TritonRestarts"] >= 1)
    assert metrics["StepNameCollisions"] == 0
    return metrics


def distinct(count: int, folder: Path) -> list[Path]:
    """``count`` archives of the same two-step ensemble under names, and so step folders, of their own."""
    return [build_ensemble(linear_ensemble(f"own{i:03d}"), folder, "local") for i in range(count)]


@pytest.mark.slow
def test_ten_names_of_one_archive_behind_four_slots(moto_server: str, linear_archive: Path) -> None:
    """The default run's fleet: loaded and unloaded over and over, which copies sharing step names do not
    survive on Triton 2.51 (--step-names shared crashed it here after 18 to 85 loads): isolate, as deployed.
    16 calls in this order reload 5 evicted names (an LRU of 4 replayed on it in order; 15 loads in all). The
    slow tier runs 200 names behind 20 slots."""
    metrics = run_fleet(moto_server, [linear_archive] * 10, "ten", max_loaded=4, calls=16)
    assert metrics["LoadedModelCountPeak"] == 4


def test_shared_step_names_load_copies_side_by_side(moto_server: str, linear_archive: Path) -> None:
    """--step-names shared, the image's behaviour and the default: two names of one archive, both loaded at once
    under the archive's own step names (namespacing, as the image runs Triton), the second one a collision."""
    names = upload(moto_server, [linear_archive] * 2, "shared")
    with LocalMME(f"s3://{BUCKET}/shared", s3_endpoint_url=moto_server) as mme:
        rt = runtime(mme.url)
        for name in names + names:
            np.testing.assert_array_equal(invoke_linear(rt, name), EXPECTED)
        metrics = mme.metrics_json()
        steps = sorted(p.name for p in (mme.cache_dir / "models").glob("*/model/fleet__*"))
    assert metrics["LoadedModelCount"] == 2 and metrics["ModelCacheHit"]["hits"] == 2
    assert metrics["StepNameCollisions"] == 1 and mme.counts()["collisions"] == 1
    assert steps == ["fleet__add_one", "fleet__add_one", "fleet__double", "fleet__double"]


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_two_hundred_names_of_one_archive_behind_twenty_slots(moto_server: str, linear_archive: Path) -> None:
    """The issue's done-means test as written: one archive under 200 names, 4 threads, 20 slots, with
    --step-names isolate (the copies `conch deploy --copies` uploads)."""
    metrics = run_fleet(moto_server, [linear_archive] * 200, "two-hundred", max_loaded=20, calls=300)
    assert metrics["LoadedModelCountPeak"] == 20


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_two_hundred_ensembles_of_their_own_behind_twenty_slots(moto_server: str, tmp_path: Path) -> None:
    """The same fleet when each archive's step names are its own (conch's `<ensemble>__<step>` default for
    distinct ensembles): what the platform does at 200 TargetModels, without Triton's namespacing cascade."""
    run_fleet(moto_server, distinct(200, tmp_path), "two-hundred-own", max_loaded=20, calls=300)
