"""`deploy()` as a whole: archives checked, uploaded, served, and what the user is warned about."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import Moto, linear_ensemble, spec

from conch import DeployError
from conch.builder.repository_build import build_ensemble
from conch.sagemaker.rollout import archives_release, deploy
from conch.sagemaker.s3 import ModelLocation

pytestmark = pytest.mark.integration


def test_replacing_an_archive_warns_that_loaded_copies_stay(moto: Moto, bucket: str, archives: list[Path]) -> None:
    location = ModelLocation(bucket, "mme")
    first = deploy(archives, location, spec(), moto.aws, poll=0.01)
    assert first.endpoint.action == "created"
    assert [w for w in first.warnings if "'unknown model'" not in w] == []  # 24.10 lacks the lookup-race fix

    changed = linear_ensemble("linear_a")
    changed.samples[0].expected = {"Z": np.zeros((2, 4), np.float32)}
    rebuilt = build_ensemble(changed, archives[0].parent, "production")
    second = deploy([rebuilt, archives[1]], location, spec(), moto.aws, poll=0.01)
    assert second.endpoint.action == "unchanged"
    assert [u.action for u in second.uploads] == ["replaced", "unchanged"]
    (warning,) = [w for w in second.warnings if "'unknown model'" not in w]
    assert "s3://conch-models/mme/linear_a.tar.gz had other bytes and was replaced" in warning
    assert "give a new version a new archive name" in warning


def test_the_release_comes_from_the_archives_and_must_be_one(tmp_path: Path) -> None:
    a = build_ensemble(linear_ensemble("rel_a"), tmp_path, "production", "24.05")
    b = build_ensemble(linear_ensemble("rel_b"), tmp_path, "production", "24.10")
    assert str(archives_release([a])) == "24.05"
    assert str(archives_release([a], "24.05")) == "24.05"
    with pytest.raises(DeployError, match=r"built for different Triton releases \(24.05: rel_a.tar.gz; 24.10: "
                       r"rel_b.tar.gz\); one endpoint runs one image"):
        archives_release([a, b])
    with pytest.raises(DeployError, match="rel_b.tar.gz was built for Triton 24.10 but the endpoint would run 24.05"):
        archives_release([a, b], "24.05")
    with pytest.raises(DeployError, match="no archives to deploy"):
        archives_release([])


def test_the_prefix_served_is_the_prefix_uploaded_to(moto: Moto, bucket: str, archives: list[Path]) -> None:
    with pytest.raises(DeployError, match="the endpoint would serve s3://conch-models/mme/ but the archives go to "
                       "s3://conch-models/other/"):
        deploy(archives, ModelLocation(bucket, "other"), spec(), moto.aws)
    assert moto.calls == []
