"""`conch bench --components`: the same traffic mix sent to each archive's inference component, of a local
endpoint conch starts over the archives (or one given by URL), routed by the component header."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import linear_ensemble

from conch.builder.repository_build import build_ensemble
from conch.cli import main
from conch.perf.load.spec import LoadSpec, Target, route_header
from conch.wire import COMPONENT_HEADER, TARGET_HEADER


@pytest.mark.integration
def test_bench_sends_each_archives_requests_to_its_component(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    dist = tmp_path / "dist"
    for name in ("bench_a", "bench_b"):
        build_ensemble(linear_ensemble(name), dist, "local")
    code = main(["bench", str(dist), "--components", "--stages", "test", "--out", str(tmp_path / "out")])
    out = capsys.readouterr().out
    assert code == 0
    summary = json.loads((tmp_path / "out" / "bench.json").read_text())
    assert summary["failures"] == 0 and summary["requests"] > 0
    components = summary["mme_metrics_after"]["components"]
    assert sum(c["Invocations"] for c in components.values()) == summary["requests"]
    assert "component local-bench-a: " in out and "0 NoCapacityInvocationFailures, 1 copies" in out


def test_the_component_header_routes_a_components_call() -> None:
    spec = LoadSpec("sagemaker", "http://127.0.0.1:1", [Target("x.tar.gz", [])], [], endpoint="text-ic",
                    components=True)
    assert route_header(spec, "x.tar.gz") == {COMPONENT_HEADER: "text-ic-x"}
    assert route_header(LoadSpec("sagemaker", None, [], []), "x.tar.gz") == {TARGET_HEADER: "x.tar.gz"}


def test_components_refuse_the_other_targets(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dist = tmp_path / "dist"
    build_ensemble(linear_ensemble("bench_c"), dist, "local")
    assert main(["bench", str(dist), "--components", "--mme", "--stages", "test"]) == 2
    assert "--components sends each archive's requests to its inference component: leave out --triton" in (
        capsys.readouterr().err)
