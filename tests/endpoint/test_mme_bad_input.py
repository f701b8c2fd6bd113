"""Bad archives and bad loads behind the local MME: each answers with an error that names the TargetModel and
the cause, nothing lands outside the cache, and the other ensembles keep answering."""

from __future__ import annotations

import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mme_steps
import numpy as np
import pytest
from botocore.exceptions import ClientError
from conftest import linear_ensemble
from mme_archives import EXPECTED, X, copies, invoke_linear, runtime, tar_with

from conch import Ensemble, PythonStep, Tensor
from conch.builder.repository_build import build_ensemble
from conch.endpoint import LocalMME

pytestmark = pytest.mark.integration
LOAD_TIMEOUT_S = 12.0  # the hung load's wait; a load that succeeds here takes 1-3 s, on a busy machine up to ~5 s


def one_step(name: str, code: Any) -> Ensemble:
    ens = Ensemble(name, max_batch_size=8)
    step = PythonStep("only", code, inputs=[Tensor("x", "FP32", [4])],
                      outputs=[Tensor("y", "FP32", [4])], max_batch_size=8)
    ens.output("Z", step(ens.input("X", "FP32", [4])))
    return ens


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two good copies of one archive, and one archive per way of going wrong."""
    root = tmp_path_factory.mktemp("bad")
    good = build_ensemble(linear_ensemble("good"), root / "built", "local")
    source = root / "source"
    copies(good, source, ["good-0.tar.gz", "good-1.tar.gz", "fresh.tar.gz"])
    (source / "truncated.tar.gz").write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    (source / "not-gzip.tar.gz").write_bytes(b"this is not an archive")
    for name, code in (("fails", mme_steps.FailingSetup), ("oom", mme_steps.OutOfMemorySetup),
                       ("hangs", mme_steps.HangingSetup)):
        build_ensemble(one_step(name, code), source, "local")
    return source


@pytest.fixture(scope="module")
def mme(folder: Path) -> Iterator[LocalMME]:
    # the good copies with step names of their own, as `conch deploy` uploads copies
    with LocalMME(folder, max_loaded=3, load_timeout=60, step_names="isolate") as endpoint:
        yield endpoint


def error_of(mme: LocalMME, target_model: str) -> dict[str, object]:
    with pytest.raises(ClientError) as caught:
        invoke_linear(runtime(mme.url), target_model)
    response = caught.value.response
    return {"code": response["Error"]["Code"], "message": response["Error"]["Message"], **response}


def others_keep_answering(mme: LocalMME) -> None:
    rt = runtime(mme.url)
    for name in ("good-0.tar.gz", "good-1.tar.gz"):
        np.testing.assert_array_equal(invoke_linear(rt, name), EXPECTED)


@pytest.mark.parametrize("name", ["truncated.tar.gz", "not-gzip.tar.gz"])
def test_an_unreadable_archive_is_a_validation_error(mme: LocalMME, name: str) -> None:
    others_keep_answering(mme)
    error = error_of(mme, name)
    assert error["code"] == "ValidationError"
    assert f"TargetModel {name!r}" in str(error["message"]) and "not a readable .tar.gz" in str(error["message"])
    others_keep_answering(mme)


def test_an_archive_with_dotdot_entries_is_refused_and_writes_nothing_outside(mme: LocalMME, folder: Path,
                                                                               tmp_path: Path) -> None:
    escape = tmp_path / "escaped.txt"
    info = tarfile.TarInfo("../" * 40 + str(escape).lstrip("/"))
    tar_with([(tarfile.TarInfo("model/config.pbtxt"), b'name: "model"\n'), (info, b"written outside")],
             folder / "dotdot.tar.gz")
    error = error_of(mme, "dotdot.tar.gz")
    assert error["code"] == "ValidationError"
    assert "TargetModel 'dotdot.tar.gz'" in str(error["message"]) and "outside" in str(error["message"])
    assert not escape.exists()
    others_keep_answering(mme)


def test_a_hard_link_to_an_outside_file_is_refused_and_the_file_is_unchanged(mme: LocalMME, folder: Path,
                                                                              tmp_path: Path) -> None:
    outside = tmp_path / "precious.txt"
    outside.write_text("keep me")
    link = tarfile.TarInfo("model/precious.txt")
    link.type, link.linkname = tarfile.LNKTYPE, str(outside)
    tar_with([(tarfile.TarInfo("model/config.pbtxt"), b'name: "model"\n'), (link, None),
              (tarfile.TarInfo("model/precious.txt"), b"overwritten through the link")], folder / "hardlink.tar.gz")
    error = error_of(mme, "hardlink.tar.gz")
    assert error["code"] == "ValidationError"
    assert "TargetModel 'hardlink.tar.gz'" in str(error["message"]) and "link" in str(error["message"])
    assert outside.read_text() == "keep me"
    others_keep_answering(mme)


def test_a_load_that_fails_is_a_model_error_with_tritons_message(mme: LocalMME) -> None:
    error = error_of(mme, "fails.tar.gz")
    assert error["code"] == "ModelError"
    assert "TargetModel 'fails.tar.gz' failed to load" in str(error["message"])
    assert "refuses to load, on purpose" in str(error["message"])
    others_keep_answering(mme)
    again = error_of(mme, "fails.tar.gz")  # tried again, as SageMaker does, and failing the same way
    assert again["code"] == "ModelError"


def test_an_out_of_memory_load_unloads_others_retries_then_says_so(mme: LocalMME) -> None:
    others_keep_answering(mme)
    before = mme.metrics_json()
    error = error_of(mme, "oom.tar.gz")
    after = mme.metrics_json()
    assert error["code"] == "ModelError" and error["OriginalStatusCode"] == 507
    assert "out of memory" in str(error["message"])
    assert after["ModelUnloads"].get("507", 0) > before["ModelUnloads"].get("507", 0)  # the platform's answer to 507
    others_keep_answering(mme)


def test_a_load_that_hangs_times_out_and_the_others_keep_loading_and_answering(folder: Path) -> None:
    # an endpoint of its own whose load timeout (12 s) no successful load on a busy machine comes near
    with LocalMME(folder, max_loaded=3, load_timeout=LOAD_TIMEOUT_S) as mme:
        hangs_then_others_load(mme)


def hangs_then_others_load(mme: LocalMME) -> None:
    error = error_of(mme, "hangs.tar.gz")
    assert error["code"] == "ModelError"
    assert "TargetModel 'hangs.tar.gz' did not load within 12 s" in str(error["message"])
    again = error_of(mme, "hangs.tar.gz")  # still loading inside Triton: answered at once, not hung again
    assert "did not load within" in str(again["message"])
    others_keep_answering(mme)
    before = mme.metrics_json()["ModelLoads"]["cold"]
    rt = runtime(mme.url)  # a first load of another archive while the hung one still loads inside Triton
    np.testing.assert_array_equal(invoke_linear(rt, "fresh.tar.gz", X + 1), (X + 1) * 2 + 1)
    assert mme.metrics_json()["ModelLoads"]["cold"] == before + 1


def test_an_archive_that_fails_conch_check_is_refused_before_triton_sees_it(mme: LocalMME, folder: Path) -> None:
    """A folder name reaches a shell when Triton starts a Python stub: the local MME checks every archive."""
    name = "evil$(touch pwned)"
    config = f'name: "{name}"\nplatform: "ensemble"\n'.encode()
    dir_info = tarfile.TarInfo(name)
    dir_info.type = tarfile.DIRTYPE
    tar_with([(dir_info, None), (tarfile.TarInfo(f"{name}/config.pbtxt"), config)], folder / "shell.tar.gz")
    error = error_of(mme, "shell.tar.gz")
    assert error["code"] == "ValidationError"
    assert "TargetModel shell.tar.gz fails `conch check`" in str(error["message"]), error["message"]
    others_keep_answering(mme)
