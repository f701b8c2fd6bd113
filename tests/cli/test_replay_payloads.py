"""`conch replay --record DIR`, then `--payloads DIR` of the same folder, and `--junit-xml PATH`, run in-process on
the real tritonserver: green on the same archive, red (with the figures) for a changed model of the same name and
once an expected output is changed."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import basic_steps
import numpy as np
import pytest
from conftest import linear_ensemble

from conch import Ensemble, PythonStep, Tensor
from conch.builder.repository_build import build_ensemble
from conch.cli import main


def quadrupled(name: str) -> Ensemble:
    """The linear ensemble's inputs and outputs, another model: Z = X * 4."""
    ens = Ensemble(name, max_batch_size=8)
    steps = [PythonStep(n, basic_steps.double, inputs=[Tensor("x", "FP32", [4])], outputs=[Tensor("y", "FP32", [4])],
                        max_batch_size=8) for n in ("double", "double_again")]
    ens.output("Z", steps[1](steps[0](ens.input("X", "FP32", [4]))))
    ens.sample("ones", {"X": np.ones((1, 4), np.float32)}, {"Z": np.full((1, 4), 4, np.float32)})
    return ens


@pytest.mark.integration
def test_record_then_payloads_then_a_changed_expected_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                             ) -> None:
    archive = build_ensemble(linear_ensemble("cli_recorded"), tmp_path / "dist", "local")
    recorded = tmp_path / "payloads"
    assert main(["replay", str(archive), "--record", str(recorded), "--junit-xml", str(tmp_path / "r.xml")]) == 0
    assert f"recorded {recorded / 'cli_recorded'}" in capsys.readouterr().err
    expected = recorded / "cli_recorded" / "two_rows.expected.json"
    meta = json.loads(expected.read_text())
    assert meta["recorded"] is True and meta["sample"] == "two rows"
    assert meta["outputs"]["Z"] == {"datatype": "FP32", "shape": [2, 4], "data": [1, 3, 5, 7, 9, 11, 13, 15]}
    cases = [c.get("name") for c in ET.parse(tmp_path / "r.xml").getroot().iter("testcase")]
    assert cases == ["cli_recorded[- @ load]", "cli_recorded[two rows @ kserve]",
                     "cli_recorded[two rows @ sagemaker-json]", "cli_recorded[two rows @ sagemaker-binary]"]

    assert main(["replay", str(archive), "--payloads", str(recorded), "--endpoint", "kserve"]) == 0
    capsys.readouterr()
    changed = build_ensemble(quadrupled("cli_recorded"), tmp_path / "changed", "local")  # same name, X * 4
    assert main(["replay", str(changed), "--payloads", str(recorded), "--endpoint", "kserve"]) == 1
    assert "Z: max abs err 13 (atol=1e-05 rtol=1e-05)" in capsys.readouterr().out  # 4 * 7 against 2 * 7 + 1
    meta["outputs"]["Z"]["data"][7] = 17.5
    expected.write_text(json.dumps(meta))
    assert main(["replay", str(archive), "--payloads", str(recorded), "--endpoint", "kserve",
                 "--junit-xml", str(tmp_path / "r2.xml")]) == 1
    assert "Z: max abs err 2.5 (atol=1e-05 rtol=1e-05)" in capsys.readouterr().out
    (failure,) = ET.parse(tmp_path / "r2.xml").getroot().iter("failure")
    assert failure.get("message") == "Z: max abs err 2.5 (atol=1e-05 rtol=1e-05)"


def test_a_missing_payload_folder_is_refused_before_a_server_starts(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", str(tmp_path / "x.tar.gz"), "--payloads", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert f"conch: error: {tmp_path / 'nowhere'}: no such payload folder; each sample is NAME.request.json" in err
    assert "Traceback" not in err


def test_one_request_file_and_a_payload_folder_together_are_refused(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    request = tmp_path / "req.json"
    request.write_text('{"inputs": [{"name": "X", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}')
    assert main(["replay", str(tmp_path / "x.tar.gz"), "--payload", str(request), "--payloads", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert ("conch: error: give --payload FILE (one request for every archive) or --payloads DIR (a payload folder), "
            "not both") in err
    assert "Traceback" not in err
