"""The notebook API (`conch.build`, `conch.replay`): the same defaults and arguments as the commands."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest
from conftest import linear_ensemble

import conch
from conch.errors import ServeError


def test_conch_build_defaults_to_production_as_conch_build_does(tmp_path: Path) -> None:
    (built,) = conch.build(linear_ensemble("by_default"), out=tmp_path).archives
    assert built.target == "production"
    with tarfile.open(built.archive) as tar:
        manifest = json.loads(tar.extractfile("conch-manifest.json").read())  # type: ignore[union-attr]
    assert manifest["target"] == "production"
    (local,) = conch.build(linear_ensemble("stand_ins"), out=tmp_path, target="local").archives
    assert local.target == "local"


def test_replay_takes_one_endpoint_by_its_name(tmp_path: Path) -> None:
    built = conch.build(linear_ensemble("one_endpoint"), out=tmp_path, target="local")
    result = conch.replay(built, endpoints="kserve")
    assert result.passed, str(result)
    assert [(r.sample, r.endpoint) for r in result.rows] == [("-", "load"), ("two rows", "kserve")]
    with pytest.raises(ServeError, match=r"unknown endpoint 'k': use kserve, sagemaker-json, sagemaker-binary"):
        conch.replay(built, endpoints="k")


def test_dir_lists_each_public_name_once() -> None:
    assert conch.ConchError is not None  # loads the public names into the package's globals
    names = dir(conch)
    assert len(names) == len(set(names))
    assert set(conch.__all__) <= set(names)
