"""KServe v2 routes of a model whose name a URL would escape (a TargetModel such as ``team+a@v1.tar.gz``):
Triton's HTTP front matches the request path as sent and decodes no %XX escape, so the name goes in verbatim,
through both callers (a profile's requests and a Locust load run), against the real tritonserver."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import linear_ensemble

from conch.archive.manifest import read_manifest
from conch.builder.repository_build import build_ensemble
from conch.errors import ServeError
from conch.perf.load.bench_run import local_triton
from conch.perf.load.run_summary import summarise
from conch.perf.load.runner import run_load
from conch.perf.load.spec import LoadSpec, archive_targets
from conch.perf.load.stages import Stage
from conch.perf.profile.load import Target
from conch.perf.profile.local_servers import sample_bodies
from conch.perf.profile.measure import Load, measure
from conch.perf.profile.server_statistics import StatsEndpoint
from conch.triton.kserve_routes import infer_path, model_path

# Every character here is one a percent-encoding client (tritonclient's quote, urllib's quote(safe=''))
# escapes, and that Triton 2.51 then looks up escaped: "unknown model 'team%2Ba%40v1...'".
ESCAPED_BY_QUOTE = "team+a@v1:b=1,c.tar.gz"


def test_a_name_goes_into_the_path_verbatim() -> None:
    assert infer_path(ESCAPED_BY_QUOTE) == f"/v2/models/{ESCAPED_BY_QUOTE}/infer"
    assert model_path("linear", "config") == "/v2/models/linear/config"
    assert model_path("linear") == "/v2/models/linear"


@pytest.mark.parametrize("name, shown", [("team a.tar.gz", "' '"), ("a%2Bb", "'%'"), ("a?b", "'?'"),
                                         ("a#b", "'#'"), ("a/b", "'/'"), ("caf\u00e9", "'\\xe9'")])
def test_a_name_no_url_path_carries_verbatim_is_refused_by_name(name: str, shown: str) -> None:
    with pytest.raises(ServeError, match=rf"cannot be reached over KServe v2 HTTP: .*{re.escape(shown)}.* decodes no "
                       "%XX escape"):
        infer_path(name)


@pytest.mark.parametrize("name", ["", ".", ".."])
def test_an_empty_or_dot_name_is_refused(name: str) -> None:
    with pytest.raises(ServeError, match="is not a model name Triton's HTTP front can route"):
        infer_path(name)


def test_a_load_run_refuses_such_a_name_before_starting_locust(tmp_path: Path) -> None:
    archive = build_ensemble(linear_ensemble("routes_refused"), tmp_path, "local")
    spec = LoadSpec("kserve", "http://127.0.0.1:1", archive_targets([archive], ["team a.tar.gz"]), [Stage(1, 1, 1)])
    with pytest.raises(ServeError, match=r"model 'team a.tar.gz' cannot be reached over KServe v2 HTTP"):
        run_load(spec)


@pytest.mark.integration
def test_profile_and_load_run_reach_a_model_whose_name_quote_escapes(tmp_path: Path) -> None:
    archive = build_ensemble(linear_ensemble("routes"), tmp_path, "local")
    manifest = read_manifest(archive)
    with local_triton([(archive, ESCAPED_BY_QUOTE)]) as url:
        load = Load(sample_bodies(manifest), "the archive's samples", requests=4)
        profile = measure(StatsEndpoint(url), Target.kserve(url, ESCAPED_BY_QUOTE), ESCAPED_BY_QUOTE, load, url)
        assert profile.run.errors == 0 and {s.model for s in profile.steps} == {"routes__double", "routes__add_one"}
        spec = LoadSpec("kserve", url, archive_targets([archive], [ESCAPED_BY_QUOTE]), [Stage(2, 1, 1)])
        summary = summarise(run_load(spec))
    assert summary["requests"] > 0 and summary["failures"] == 0, summary["errors"]


@pytest.mark.integration
def test_replay_over_kserve_reaches_a_target_model_whose_name_quote_escapes(tmp_path: Path, triton: object) -> None:
    import shutil

    from conch.replays.local_replay import replay_archives

    archive = build_ensemble(linear_ensemble("routes_replay"), tmp_path / "dist", "local")
    renamed = tmp_path / "team+a@v1.tar.gz"
    shutil.copyfile(archive, renamed)
    report = replay_archives([renamed], server=triton, endpoints=["kserve"])  # type: ignore[arg-type]
    rows = [r for r in report.rows if r.endpoint == "kserve"]
    assert rows and all(r.passed for r in rows), report.table()
