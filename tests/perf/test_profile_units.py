"""The pure parts of conch profile: statistics differences, the critical path, findings, summary metrics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conch.errors import ServeError
from conch.perf.profile.dag import Dag, DagStep, critical_path, dag_of
from conch.perf.profile.figures import difference
from conch.perf.profile.findings import StepConfig, step_findings
from conch.perf.profile.measure import Load
from conch.perf.profile.profile_report import RunInfo, assemble
from conch.perf.profile.server_statistics import parse_summaries


def stats(requests: int, *, queue: float = 0.0, infer: float = 1.0, cin: float = 0.0, cout: float = 0.0,
          executions: int | None = None, inferences: int | None = None) -> dict[str, Any]:
    """A model's statistics entry with mean milliseconds per request."""
    def cat(ms: float) -> dict[str, int]:
        return {"count": requests, "ns": int(ms * 1e6 * requests)}

    return {"inference_count": inferences if inferences is not None else requests,
            "execution_count": executions if executions is not None else requests,
            "inference_stats": {"success": cat(queue + infer + cin + cout), "fail": {"count": 0, "ns": 0},
                                "queue": cat(queue), "compute_input": cat(cin), "compute_infer": cat(infer),
                                "compute_output": cat(cout)},
            "batch_stats": [{"batch_size": 1, "compute_infer": {"count": executions or requests, "ns": 0}}]}


def diamond() -> Dag:
    """a -> (b | c) -> d"""
    return Dag("e", (DagStep("a", ("IN",), ("t1",)), DagStep("b", ("t1",), ("t2",)), DagStep("c", ("t1",), ("t3",)),
                     DagStep("d", ("t2", "t3"), ("OUT",))))


def test_the_critical_path_takes_the_longer_branch_and_gives_the_other_its_slack() -> None:
    path = critical_path(diamond(), (1.0, 40.0, 5.0, 2.0))
    assert path.chain == (0, 1, 3)
    assert path.length_ms == 43.0
    assert path.slack_ms == (0.0, 0.0, 35.0, 0.0)
    assert path.start_ms(3, (1.0, 40.0, 5.0, 2.0)) == 41.0


def test_a_dag_is_read_from_the_ensemble_config_and_a_step_config_is_refused() -> None:
    config = {"name": "e", "ensemble_scheduling": {"step": [
        {"model_name": "b", "input_map": {"x": "t1"}, "output_map": {"y": "OUT"}},
        {"model_name": "a", "input_map": {"x": "IN"}, "output_map": {"y": "t1"}}]}}
    dag = dag_of(config)
    assert dag.order() == [1, 0]
    with pytest.raises(ServeError, match="model 'a' is not an ensemble .* profile the ensemble"):
        dag_of({"name": "a", "backend": "python"})
    cycle = Dag("e", (DagStep("a", ("t2",), ("t1",)), DagStep("b", ("t1",), ("t2",))))
    with pytest.raises(ServeError, match="ensemble 'e': its steps form a cycle"):
        cycle.order()


def test_figures_are_the_difference_between_two_snapshots() -> None:
    before, after = stats(10, queue=2, infer=8), stats(30, queue=4, infer=8)
    f = difference("m", before, after)
    assert f.requests == 20
    assert f.queue_ms == pytest.approx((4 * 30 - 2 * 10) / 20)
    assert f.compute_infer_ms == pytest.approx(8)
    assert f.batch_size == 1.0


def test_findings_name_their_figure() -> None:
    queued = difference("s", None, stats(10, queue=30, infer=10))
    config = StepConfig("python", 1, 8, False, 0)
    found = step_findings(queued, config, concurrency=8, share=0.5, critical=True, slack_ms=0.0)
    texts = [f.text() for f in found]
    assert "s: queue time 75% of this step's (30.0 ms of 40.0 ms): add an instance (it has 1) or enable dynamic " \
           "batching" in texts
    alone = step_findings(queued, config, concurrency=1, share=0.5, critical=True, slack_ms=0.0)
    assert "nothing waits for an instance: the server's threads waited for a core" in alone[0].advice
    unbatched = difference("s", None, stats(10, infer=10))
    dynamic = StepConfig("onnxruntime", 1, 8, True, 100)
    found = step_findings(unbatched, dynamic, concurrency=8, share=0.1, critical=False, slack_ms=0.0)
    assert [f.figure for f in found] == ["batch size achieved 1.00 requests per execution (1.0 rows) with dynamic "
                                         "batching on, at concurrency 8"]
    assert "the delay (100 us) is too short" in found[0].advice
    batched = difference("s", None, stats(10, infer=10, executions=2))
    assert not step_findings(batched, dynamic, concurrency=8, share=0.1, critical=False, slack_ms=0.0)
    moving = difference("s", None, stats(10, infer=4, cin=2, cout=2))
    found = step_findings(moving, config, concurrency=1, share=0.1, critical=False, slack_ms=0.0)
    assert [f.figure for f in found] == ["compute input + output 4.0 ms (50% of this step's)"]
    assert "serialising tensors through shared memory" in found[0].advice


def test_the_scheduler_overhead_is_end_to_end_less_the_critical_path() -> None:
    after = {"e": stats(10, infer=60), "a": stats(10, infer=1), "b": stats(10, infer=40), "c": stats(10, infer=5),
             "d": stats(10, infer=2)}
    run = RunInfo("here", "x", 10, 1, 1.0, {"mean": 51.0})
    p = assemble(diamond(), {}, after, {}, run)
    assert p.path.length_ms == pytest.approx(43.0)
    assert p.overhead_ms == pytest.approx(17.0)
    assert p.findings and "the ensemble scheduler adds 17.0 ms (28% of end to end)" in p.findings[0].figure
    assert "critical path: a -> b -> d = 43.0 ms of 60.0 ms end to end" in p.table()


def test_summary_quantiles_are_read_in_milliseconds() -> None:
    text = "\n".join([
        "# TYPE nv_inference_request_summary_us summary",
        'nv_inference_request_summary_us{model="e",version="1",quantile="0.5"} 4100',
        'nv_inference_request_summary_us{model="e",version="1",quantile="0.99"} 4500',
        'nv_inference_request_summary_us{model="e",version="1",quantile="0.9"} 4400',
        'nv_inference_queue_summary_us{model="e",version="1",quantile="0.5"} NaN',
        'nv_inference_request_summary_us_count{model="e",version="1"} 3'])
    assert parse_summaries(text) == {"e": {"request": {"p50": 4.1, "p99": 4.5}}}


def test_a_load_without_bodies_or_requests_is_refused() -> None:
    with pytest.raises(ServeError, match="the archive has no samples; give --payload FILE"):
        Load((), "none")
    with pytest.raises(ServeError, match="--requests 0 and --concurrency 1 must be at least 1"):
        Load((object(),), "x", 0, 1)  # type: ignore[arg-type]


def test_the_cli_says_what_is_missing_in_one_line(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    from conch.cli import main

    assert main(["profile", "--url", "http://127.0.0.1:9"]) == 2
    assert "conch: error: --url needs the archives (for their samples and names) or --payload FILE and --model " \
           "NAME" in capfd.readouterr().err
    bad = tmp_path / "request.json"
    bad.write_text('{"outputs": []}')
    assert main(["profile", "--url", "http://127.0.0.1:9", "--payload", str(bad), "--model", "m"]) == 2
    assert f"--payload {bad}: not a KServe v2 JSON request (no 'inputs' list)" in capfd.readouterr().err
    assert main(["profile"]) == 2
    assert "give the ensembles or archives to profile" in capfd.readouterr().err


def test_the_dag_picture_colours_each_step_by_its_share_and_draws_the_critical_path_bold() -> None:
    from conch.diagram import share_colour, to_dot, to_mermaid
    from conch.perf.profile.pictures import profile_graph

    def step(model: str, source: str, out: str) -> dict[str, Any]:
        return {"model_name": model, "input_map": {"x": source}, "output_map": {"y": out}}

    config = {"name": "e", "input": [{"name": "IN", "data_type": "TYPE_FP32", "dims": [4]}],
              "output": [{"name": "OUT", "data_type": "TYPE_FP32", "dims": [4]}],
              "ensemble_scheduling": {"step": [step("a", "IN", "t1"), step("b", "t1", "OUT")]}}
    after = {"e": stats(10, infer=50), "a": stats(10, infer=40), "b": stats(10, infer=10)}
    p = assemble(dag_of(config), {}, after, {"e": config, "a": {"backend": "python"}}, RunInfo("here", "x", 10, 1,
                 1.0, {}))
    g = profile_graph(p)
    a = next(n for n in g.nodes if n.id == "a")
    assert a.fill == share_colour(0.8) and a.bold and "40.0 ms · 80% of end to end" in a.lines
    assert [(e.source, e.target) for e in g.edges] == [("in:IN", "a"), ("a", "b"), ("b", "out:OUT")]
    assert f'fillcolor="{share_colour(0.8)}"' in to_dot(g) and "penwidth=3" in to_dot(g)
    assert f"fill:{share_colour(0.2)},stroke-width:3px" in to_mermaid(g)


def test_a_server_without_statistics_and_a_bench_without_stats_url_are_named(tmp_path: Path) -> None:
    import argparse

    from conch.cli.profiling import bench_profiler
    from conch.errors import BenchError
    from conch.perf.profile.local_servers import profile_archives
    from conch.perf.profile.server_statistics import StatsEndpoint

    nobody = StatsEndpoint("http://127.0.0.1:9", timeout=2)
    with pytest.raises(ServeError, match=r"http://127.0.0.1:9 did not answer GET /v2/models/stats .* give the KServe "
                       "v2 HTTP address"):
        nobody.snapshot(["m"])
    with pytest.raises(ServeError, match="http://127.0.0.1:9 did not answer GET /v2/models/m/config .* running Triton"):
        nobody.config("m")
    assert nobody.quantiles() == {}
    with pytest.raises(BenchError, match="with --endpoint-url give --stats-url"):
        bench_profiler(argparse.Namespace(profile=True, stats_url=None), None, ["x.tar.gz"])
    with pytest.raises(ServeError, match="mode 'gpu': choose triton or mme"):
        profile_archives([tmp_path / "x.tar.gz"], lambda m: Load((), "-"), mode="gpu")


def test_without_matplotlib_the_waterfall_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from conch.perf.profile.pictures import MatplotlibMissing, waterfall_png

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    run = RunInfo("here", "x", 10, 1, 1.0, {})
    p = assemble(diamond(), {}, {"e": stats(10), "a": stats(10), "b": stats(10), "c": stats(10), "d": stats(10)},
                 {}, run)
    with pytest.raises(MatplotlibMissing, match="the waterfall PNG needs matplotlib: pip install matplotlib"):
        waterfall_png(p)


def test_a_trace_file_becomes_one_request_per_ensemble_call_with_its_steps() -> None:
    from conch.perf.profile.trace import parse_traces

    def stamps(trace: int, **events: int) -> list[dict[str, Any]]:
        return [{"id": trace, "timestamps": [{"name": k, "ns": v}]} for k, v in events.items()]

    entries = [{"id": 1, "model_name": "e", "model_version": 1}, *stamps(1, REQUEST_START=1000, REQUEST_END=9000),
               {"id": 2, "model_name": "a", "parent_id": 1}, *stamps(2, REQUEST_START=2000, COMPUTE_START=3000,
                                                                       REQUEST_END=8000),
               {"id": 3, "model_name": "other", "model_version": 1}, *stamps(3, REQUEST_START=0, REQUEST_END=5)]
    (traced,) = parse_traces(entries, "e")
    assert traced.end_to_end_ms == pytest.approx(0.008)
    assert [(s.model, s.ms["COMPUTE_START"]) for s in traced.steps] == [("a", pytest.approx(0.002))]


def test_two_archives_of_one_name_are_refused_on_the_mme_before_either_is_profiled(tmp_path: Path) -> None:
    from conch.perf.profile.local_servers import profile_archives

    archives = []
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        archives.append(tmp_path / folder / "shop.tar.gz")
        archives[-1].write_bytes(folder.encode())
    with pytest.raises(ServeError, match=r"b/shop.tar.gz and .*a/shop.tar.gz are both named 'shop.tar.gz', and an "
                       r"archive's name is its TargetModel; rename one"):
        profile_archives(archives, lambda _: pytest.fail("no archive is profiled"), mode="mme")
