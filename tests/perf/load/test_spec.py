"""The requests a load run sends come from an archive's own manifest; archives that cannot give them are
refused by name before any process starts."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import linear_ensemble

from conch.builder.repository_build import build_ensemble
from conch.ensembles.samples import Tolerance, check_to_json
from conch.errors import BenchError
from conch.perf.load.spec import archive_requests


def test_each_sample_becomes_a_request_carrying_its_checks(tmp_path: Path) -> None:
    archive = build_ensemble(linear_ensemble("spec_ok"), tmp_path, "local")
    (request,) = archive_requests(archive, "json")
    assert (request.sample, request.body_kind, request.content_type) == ("two rows", "json", "application/json")
    assert request.checks == {"Z": check_to_json(Tolerance())}


def test_archives_that_cannot_give_requests_are_refused_by_name(tmp_path: Path) -> None:
    (tmp_path / "text.tar.gz").write_text("not an archive")
    with pytest.raises(BenchError, match=r"text.tar.gz is not a readable .tar.gz"):
        archive_requests(tmp_path / "text.tar.gz")
    archive = build_ensemble(linear_ensemble("spec_kind"), tmp_path, "local")
    with pytest.raises(BenchError, match=r"body 'xml': use json or binary"):
        archive_requests(archive, "xml")
