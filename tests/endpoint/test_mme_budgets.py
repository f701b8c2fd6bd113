"""The platform's bookkeeping on the local MME: concurrent first calls load once, the memory budget unloads
by measured PSS, and the disk budget deletes files of unloaded models only. Copies of one archive run with
--step-names isolate, what `conch deploy` uploads (stamped copies), so that the churn is the platform's only."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from conftest import linear_ensemble
from mme_archives import EXPECTED, copies, invoke_linear, runtime

from conch.builder.repository_build import build_ensemble
from conch.endpoint import LocalMME

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def linear_archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_ensemble(linear_ensemble("budget"), tmp_path_factory.mktemp("built"), "local")


def test_concurrent_first_calls_download_and_load_once(linear_archive: Path, tmp_path: Path) -> None:
    copies(linear_archive, tmp_path / "src", ["only.tar.gz"])
    with LocalMME(tmp_path / "src") as mme:
        with ThreadPoolExecutor(max_workers=8) as pool:
            answers = list(pool.map(lambda _: invoke_linear(runtime(mme.url), "only.tar.gz"), range(8)))
        metrics = mme.metrics_json()
    for z in answers:
        np.testing.assert_array_equal(z, EXPECTED)
    assert metrics["ModelDownloads"] == 1 and metrics["ModelLoads"] == {"cold": 1, "reload": 0}
    # every call that found the model not loaded waited for the one load and counted its wait
    misses = metrics["ModelCacheHit"]["misses"]
    assert misses >= 1 and metrics["ModelLoadingWaitTime"]["count"] == misses


def test_the_memory_budget_unloads_least_recently_used_models(linear_archive: Path, tmp_path: Path) -> None:
    names = copies(linear_archive, tmp_path / "src", [f"mem-{i}.tar.gz" for i in range(5)])
    with LocalMME(tmp_path / "src", step_names="isolate") as probe:  # what the server and one loaded copy cost here
        empty = probe.metrics_json()["MemoryUsedBytes"]
        probe.load(names[0])
        one = probe.metrics_json()["MemoryUsedBytes"]
    per_copy = one - empty
    assert per_copy > 0
    budget = empty + int(2.5 * per_copy)  # room for two copies, not three
    with LocalMME(tmp_path / "src", memory_budget=budget, step_names="isolate") as mme:
        rt = runtime(mme.url)
        for name in names:
            np.testing.assert_array_equal(invoke_linear(rt, name), EXPECTED)
        metrics = mme.metrics_json()
    assert metrics["ModelUnloads"].get("memory", 0) >= 2
    assert metrics["LoadedModelCountPeak"] <= 3
    assert metrics["MemoryBudgetBytes"] == budget


def test_the_disk_budget_deletes_files_of_unloaded_models_only(linear_archive: Path, tmp_path: Path) -> None:
    names = copies(linear_archive, tmp_path / "src", [f"disk-{i}.tar.gz" for i in range(4)])
    with LocalMME(tmp_path / "src", step_names="isolate") as probe:
        probe.load(names[0])
        unpacked = probe.metrics_json()["DiskUsedBytes"]
    # room for two unpacked archives: two loaded ones keep theirs, every unloaded one loses its files
    with LocalMME(tmp_path / "src", max_loaded=2, disk_budget=int(2.5 * unpacked),
                  cache_dir=tmp_path / "cache", step_names="isolate") as mme:
        rt = runtime(mme.url)
        for name in [*names, names[0]]:
            np.testing.assert_array_equal(invoke_linear(rt, name), EXPECTED)
        metrics = mme.metrics_json()
        kept = [p for p in (tmp_path / "cache" / "models").iterdir() if p.is_dir()]
    assert metrics["ModelDiskEvictions"] >= 2
    assert metrics["DiskUsedBytes"] <= int(2.5 * unpacked)
    assert len(kept) == 2
    assert metrics["ModelDownloads"] == 5  # disk-0 came back from the source: its files had been deleted


def test_files_of_unloaded_models_stay_within_the_disk_budget(linear_archive: Path, tmp_path: Path) -> None:
    names = copies(linear_archive, tmp_path / "src", [f"keep-{i}.tar.gz" for i in range(3)])
    with LocalMME(tmp_path / "src", max_loaded=1, step_names="isolate") as mme:
        rt = runtime(mme.url)
        for name in [*names, names[0]]:
            np.testing.assert_array_equal(invoke_linear(rt, name), EXPECTED)
        metrics = mme.metrics_json()
    assert metrics["ModelDownloads"] == 3 and metrics["ModelLoads"]["reload"] == 1  # the reload skipped the download
