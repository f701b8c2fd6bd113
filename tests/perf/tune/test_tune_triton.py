"""conch tune on the real tritonserver: an ensemble whose first step sleeps 40 ms per execution on one instance
(the known bottleneck) and whose second sleeps 5 ms. Started from the defaults, the tune must change the slow
step first (an instance more, or batching), keep it only on a measured gain, and write settings back that build,
check and replay green. Two archives on one server share the search under a mix."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from conch.builder.discover import discover
from conch.builder.repository_build import build_ensemble
from conch.cli import main
from conch.errors import BenchError
from conch.perf.profile.load import Body
from conch.perf.profile.server_statistics import StatsEndpoint
from conch.perf.tune.search import guided
from conch.perf.tune.servers import local_server, remote_server
from conch.perf.tune.space import Knobs, Levels, Settings
from conch.replays.local_replay import stage
from conch.triton.mme import MultiModelClient
from conch.triton.server import LocalTriton

pytestmark = pytest.mark.integration

ENSEMBLE = '''"""X -> slow (40 ms per execution) -> fast (5 ms) -> Y."""

import numpy as np
import profile_steps as ps

from conch import Ensemble, PythonStep, Tensor

slow = PythonStep("slow", ps.sleep_40ms, inputs=[Tensor("x", "FP32", [4])],
                  outputs=[Tensor("y", "FP32", [4])], max_batch_size=8)
fast = PythonStep(
    "fast",
    ps.sleep_5ms,
    inputs=[Tensor("x", "FP32", [4])],
    outputs=[Tensor("y", "FP32", [4])],
    max_batch_size=8,
)

{name} = Ensemble("{name}", max_batch_size=8)
x = {name}.input("X", "FP32", [4])
{name}.output("Y", fast(slow(x)))
{name}.sample("ones", {{"X": np.ones((1, 4), np.float32)}}, {{"Y": np.ones((1, 4), np.float32)}})
'''

QUICK = ["--max-instances", "2", "--delays-us", "0", "--max-concurrency", "4", "--seconds-per-level", "0.6"]


def test_the_tune_finds_the_sleeping_step_and_its_settings_build_check_and_replay(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "tune_demo.py"
    source.write_text(ENSEMBLE.format(name="tune_demo"))
    out = tmp_path / "out"
    code = main(["tune", str(source), "--from-defaults", "--p99-ms", "3000", "--budget-minutes", "1.5", *QUICK,
                 "--out", str(out), "--apply", "--json"])
    assert code == 0
    doc = json.loads(capfd.readouterr().out)
    first = doc["rounds"][0]
    assert first["step"] == "slow"  # the step that limits the critical path, first
    # why: its figures at the trial's best level (queued there, or not when one request at a time was the best)
    assert re.match(r"(queue \d+% of its time \(.*\), )?\d+% of end to end, critical: ", first["why"])
    slow = next(c for c in doc["chosen"] if c["step"] == "slow")
    assert slow["instances"] == 2 or slow["dynamic_batching"]
    assert doc["after"]["throughput_per_s"] >= 1.3 * doc["before"]["throughput_per_s"]
    assert doc["after"]["best"]["p99_ms"] <= 3000
    kept = [r for r in doc["rounds"] if r["kept"]]
    assert kept and all(r["again_per_s"] is not None for r in kept)  # each kept change had its A/B
    assert (out / "tune.png").stat().st_size > 0 and json.loads((out / "tune.json").read_text())["trials"]
    # the declaration now says what was measured, and it builds, checks and replays
    patched = source.read_text()
    assert doc["patch"]["files"] == [str(source)] and "--- a/tune_demo.py" in doc["patch"]["diff"]
    assert "instance_group=InstanceGroup(count=2)" in patched or "dynamic_batching=DynamicBatching(" in patched
    (ensemble,) = discover([source])
    dist = tmp_path / "dist"
    assert main(["build", str(source), "--target", "local", "--out", str(dist)]) == 0
    assert main(["check", str(dist)]) == 0
    assert main(["replay", str(dist)]) == 0
    assert ensemble.name == "tune_demo"


def test_two_archives_share_one_server_and_the_mix_weighs_their_steps(tmp_path: Path) -> None:
    archives = []
    for name in ("mix_a", "mix_b"):
        source = tmp_path / f"{name}.py"
        source.write_text(ENSEMBLE.format(name=name))
        (ensemble,) = discover([source])
        archives.append(build_ensemble(ensemble, tmp_path / "dist", "local"))
    levels = Levels(max_instances=2, delays_us=(0,))
    with local_server(archives, mix={"mix_a.tar.gz": 3, "mix_b.tar.gz": 1}, p99_ms=3000, max_concurrency=4,
                      seconds_per_level=0.6) as server:
        assert [w.weight for w in server.workloads] == [0.75, 0.25]
        assert len(server.steps) == 4 and server.declared.of(server.steps[0]) == Knobs()
        start = Settings({(s.ensemble, s.model): Knobs() for s in server.steps})
        outcome = guided(server, start, levels, budget_s=60, max_trials=4)
    assert outcome.trials <= 4 + 1  # a round's A/B may measure once more than the cap
    first = outcome.rounds[0].move.step
    assert (first.ensemble, first.step) == ("mix_a.tar.gz", "slow")  # three quarters of the traffic
    assert outcome.start.profiles and {p.ensemble for p in outcome.start.profiles} == {"mix_a.tar.gz", "mix_b.tar.gz"}


def test_refusals_before_any_server_starts(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    assert main(["tune"]) == 2
    assert "give the ensembles or archives to tune (.py files, folders, .tar.gz)" in capfd.readouterr().err
    assert main(["tune", str(tmp_path), "--p99-ms", "0"]) == 2
    assert "--p99-ms 0: give the latency target in milliseconds, above 0" in capfd.readouterr().err
    with pytest.raises(SystemExit):
        main(["tune", str(tmp_path), "--mix", "a.tar.gz"])
    assert "'a.tar.gz': give zipf, NAME=WEIGHT,... (e.g. a.tar.gz=3,b.tar.gz=1) or a `conch bench --json` file" in \
        capfd.readouterr().err
    bench = tmp_path / "bench.json"
    bench.write_text("{}")
    with pytest.raises(SystemExit):
        main(["tune", str(tmp_path), "--mix", str(bench)])
    assert "not a `conch bench --json` document with targets and their requests" in capfd.readouterr().err
    with pytest.raises(SystemExit):
        main(["tune", str(tmp_path), "--delays-us", "x"])
    assert "'x': give whole numbers separated by commas, e.g. 0,2000" in capfd.readouterr().err
    with pytest.raises(SystemExit):
        main(["tune", str(tmp_path), "--threads", ","])
    assert "',': give one or more whole numbers of 0 or more" in capfd.readouterr().err


def test_through_the_local_mme_and_on_a_triton_by_url(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "via_front.py"
    source.write_text(ENSEMBLE.format(name="via_front"))
    (ensemble,) = discover([source])
    archive = build_ensemble(ensemble, tmp_path / "dist", "local")
    with local_server([archive], mode="mme", p99_ms=3000, max_concurrency=2, seconds_per_level=0.5) as server:
        assert server.server.startswith("the local MME (http://127.0.0.1:")
        outcome = guided(server, server.declared, Levels(max_instances=2, delays_us=(0,)), budget_s=60, max_trials=2)
    assert outcome.start.throughput > 0 and outcome.start.profiles[0].ensemble == "via_front.tar.gz"
    # a Triton of the user's: the ensemble under its own name, steps reloaded through its repository API
    with LocalTriton() as triton:
        MultiModelClient(triton.sagemaker_url, triton.http_url).load("via_front", stage(archive, triton), 120)
        code = main(["tune", str(archive), "--url", triton.http_url, "--step", "slow", "--budget-minutes", "0.3",
                     *QUICK, "--out", str(tmp_path / "out"), "--json"])
    assert code == 0
    doc = json.loads(capfd.readouterr().out)
    assert doc["server"] == triton.http_url and doc["patch"] == {"files": [], "notes": []}
    assert {r["step"] for r in doc["rounds"]} <= {"slow"}  # --step: only the slow step is changed


def test_a_step_not_given_and_a_server_that_cannot_reload(tmp_path: Path) -> None:
    source = tmp_path / "no_reload.py"
    source.write_text(ENSEMBLE.format(name="no_reload"))
    (ensemble,) = discover([source])
    archive = build_ensemble(ensemble, tmp_path / "dist", "local")
    with local_server([archive], p99_ms=3000, max_concurrency=2, seconds_per_level=0.5) as server:
        with pytest.raises(BenchError, match=r"--step 'encoder' is not a step of what is tuned here; the steps are "
                                             r"no_reload/slow, no_reload/fast"):
            server.only(["encoder"])
        key = (server.steps[0].ensemble, server.steps[0].model)
        server.base[key] = {**server.base[key], "instance_group": [{"kind": "KIND_NOWHERE"}]}  # no such kind
        with pytest.raises(BenchError, match=r"the local tritonserver refused to load step 'slow' of no_reload.tar.gz "
                                             r"with 2 instances, no batching \(\[500\] failed to load 'no_reload__slow'"
                                             r".*see the server's log"):
            server.apply(server.declared.with_step(server.steps[0], Knobs(instances=2)))
        good = server.workloads
        server.workloads = tuple(replace(w, bodies=(Body(b'{"inputs": []}'),)) for w in good)  # Triton refuses it
        with pytest.raises(BenchError, match=r"no_reload.tar.gz on the local tritonserver: the warm-up request "
                                             r"failed: HTTP 400"):
            server.measure(server.declared)
        server.workloads = good
        server.stats = StatsEndpoint("http://127.0.0.1:9")  # nothing listens: the reload gets no answer
        bad = server.declared.with_step(server.steps[0], Knobs(instances=2))
        with pytest.raises(BenchError, match="did not answer the reload of step 'slow'"):
            server.apply(bad)


def test_refusals_of_the_servers(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(BenchError, match="mode 'lambda': choose triton or mme"), local_server([], mode="lambda"):
        pass
    with pytest.raises(BenchError, match=r"with --url give the archives the server has loaded, for their samples "
                                         r"and step names"):
        remote_server("http://127.0.0.1:9", [tmp_path / "none.tar.gz"], p99_ms=100)
    broken = tmp_path / "broken.py"
    broken.write_text("this is not python\n")
    assert main(["tune", str(broken)]) == 2
    assert "nothing to tune: no ensemble built and no archive given" in capfd.readouterr().err
    quiet = tmp_path / "quiet.py"
    quiet.write_text(ENSEMBLE.format(name="quiet").rsplit("\nquiet.sample(", 1)[0] + "\n")
    (ensemble,) = discover([quiet])
    archive = build_ensemble(ensemble, tmp_path / "dist", "local")
    with pytest.raises(BenchError, match=r"quiet.tar.gz has no samples to send; build it with samples "
                                         r"\(ensemble.sample\(...\)\)"), local_server([archive], p99_ms=100):
        pass
