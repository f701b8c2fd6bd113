"""Derived ensemble warmup: one payload run in-process gives every step a model_warmup whose files hold
exactly the tensors that step receives, and a load on the real tritonserver runs it."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
from conftest import linear_ensemble
from run_pipelines import counter_ensemble, text_ensemble

import conch
from conch import BuildError, DeclarationError
from conch.builder.repository_build import build_ensemble, render_repository
from conch.builder.warmup_inputs import WARMUP_NAME, raw_bytes
from conch.compiler.pbtxt import check_config
from conch.replays.local_replay import stage
from conch.triton.mme import MultiModelClient
from conch.triton.server import LocalTriton


def configs(repo) -> dict[str, object]:  # type: ignore[no-untyped-def]
    return {name.split("/")[0]: check_config(data.decode(), name.split("/")[0])
            for name, data in repo.files.items() if name.endswith("config.pbtxt")}


@pytest.mark.parametrize("target", ["local", "production"])
def test_every_step_gets_the_tensors_it_receives_from_the_payload(target: str) -> None:
    ens = linear_ensemble("warm_linear")
    ens.warmup("two rows")
    repo = render_repository(ens, target, "24.10")
    ran = conch.run(ens, ens.samples[0].inputs, intermediates=True)
    parsed = configs(repo)
    assert not parsed["warm_linear"].model_warmup  # type: ignore[attr-defined]  # never on the ensemble
    for trace in ran.steps:
        (warmup,) = parsed[trace.model_name].model_warmup  # type: ignore[attr-defined]
        assert warmup.name == WARMUP_NAME and warmup.batch_size == 2 and warmup.count == 1
        for name, array in trace.inputs.items():
            spec = warmup.inputs[name]
            assert list(spec.dims) == list(array.shape[1:])  # the step's input shape, batch excluded
            data = repo.files[f"{trace.model_name}/warmup/{spec.input_data_file}"]
            np.testing.assert_array_equal(np.frombuffer(data, np.float32).reshape(array.shape[1:]), array[0])
    assert repo.manifest["warmup"]["source"] == "sample 'two rows'"
    assert set(repo.manifest["warmup"]["steps"]) == {"warm_linear__double", "warm_linear__add_one"}


def test_builds_with_a_derived_warmup_are_byte_identical(tmp_path: Path) -> None:
    ens = linear_ensemble("warm_twice")
    ens.warmup("two rows")
    first = build_ensemble(ens, tmp_path / "a", "local").read_bytes()
    assert build_ensemble(ens, tmp_path / "b", "local").read_bytes() == first


def test_bytes_tensors_are_written_length_prefixed() -> None:
    ens = text_ensemble("warm_text")
    ens.warmup({"X": np.full((1, 4), 2.5, np.float32)})
    repo = render_repository(ens, "local", "24.10")
    (warmup,) = configs(repo)["warm_text__text_length"].model_warmup  # type: ignore[attr-defined]
    assert warmup.inputs["t"].data_type == 13  # TYPE_STRING
    data = repo.files[f"warm_text__text_length/warmup/{warmup.inputs['t'].input_data_file}"]
    assert data == struct.pack("<I", 2) + b"10"
    assert raw_bytes(np.array([[b"ab", "c"]], dtype=object), conch.DType.BYTES) == b"\x02\0\0\0ab\x01\0\0\0c"


def test_a_bad_warmup_is_named() -> None:
    ens = linear_ensemble("warm_bad")
    with pytest.raises(DeclarationError, match=r"ensemble 'warm_bad' warmup: input 'X' has shape \[2, 3\]"):
        ens.warmup({"X": np.ones((2, 3), np.float32)})
    with pytest.raises(DeclarationError, match="count must be >= 1"):
        ens.warmup("two rows", count=0)
    ens.warmup("no such sample")
    with pytest.raises(BuildError, match=r"ensemble 'warm_bad': warmup from sample 'no such sample': .*its samples "
                                         r"are 'two rows'"):
        render_repository(ens, "local", "24.10")


def test_no_warmup_declared_changes_nothing() -> None:
    repo = render_repository(linear_ensemble("warm_none"), "local", "24.10")
    assert repo.manifest["warmup"] is None
    assert not any("/warmup/" in name for name in repo.files)


@pytest.mark.integration
def test_a_load_runs_the_derived_warmup_on_the_real_server(tmp_path: Path) -> None:
    cold, warm = counter_ensemble("warm_cold"), counter_ensemble("warm_warm")
    x = np.zeros((1, 4), np.float32)
    warm.warmup({"X": x}, count=2)
    archives = [build_ensemble(e, tmp_path, "local") for e in (cold, warm)]
    with LocalTriton(tmp_path / "server", log_verbose=1) as triton:
        client = MultiModelClient(triton.sagemaker_url, triton.http_url)
        for archive in archives:
            client.load(archive.name, stage(archive, triton), 120)
        # The step adds how many times it ran: twice at load with the warmup, never without.
        assert client.invoke_json("warm_cold.tar.gz", {"X": x})["Y"].tolist() == [[1.0] * 4]
        assert client.invoke_json("warm_warm.tar.gz", {"X": x})["Y"].tolist() == [[3.0] * 4]
        log = triton.log_path.read_text(errors="replace")
    for iteration in (1, 2):
        assert (f"model 'warm_warm__count' instance warm_warm__count_0 is running warmup sample '{WARMUP_NAME}' "
                f"for iteration {iteration}") in log
    assert "model 'warm_cold__count' instance warm_cold__count_0 is running warmup" not in log
