"""conch profile against the real tritonserver: the critical path of parallel branches, queue time under
concurrency, and the same figures through the local MME, a server of the user's and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import profile_steps as ps
import pytest

from conch import Ensemble, InstanceGroup, PythonStep, ServeError, Tensor
from conch.archive.manifest import Manifest
from conch.builder.repository_build import build_ensemble
from conch.cli import main
from conch.perf.profile.local_servers import profile_archives, sample_bodies
from conch.perf.profile.measure import Load
from conch.perf.profile.profile_report import Profile, StepProfile
from conch.perf.profile.server_statistics import StatsEndpoint
from conch.replays.local_replay import stage
from conch.triton.mme import MultiModelClient
from conch.triton.server import LocalTriton

pytestmark = pytest.mark.integration


def _t(name: str) -> list[Tensor]:
    return [Tensor(name, "FP32", [4])]


def branches(name: str = "branches") -> Ensemble:
    """X -> (sleep 40 ms | sleep 5 ms) -> join -> Z."""
    ens = Ensemble(name, max_batch_size=8)
    x = ens.input("X", "FP32", [4])
    slow = PythonStep("slow40", ps.sleep_40ms, inputs=_t("x"), outputs=_t("y"), max_batch_size=8)(x)
    fast = PythonStep("fast5", ps.sleep_5ms, inputs=_t("x"), outputs=_t("y"), max_batch_size=8)(x)
    ens.output("Z", PythonStep("join", ps.join, inputs=[*_t("a"), *_t("b")],
                               outputs=_t("z"), max_batch_size=8)(slow, fast))
    ens.sample("ones", {"X": np.ones((1, 4), np.float32)}, {"Z": np.full((1, 4), 2, np.float32)})
    return ens


def instances(name: str = "instances") -> Ensemble:
    """X -> (sleep 20 ms on one instance | sleep 20 ms on two) -> join -> Z."""
    ens = Ensemble(name, max_batch_size=8)
    x = ens.input("X", "FP32", [4])
    one = PythonStep("one_instance", ps.sleep_20ms, inputs=_t("x"), outputs=_t("y"), max_batch_size=8)(x)
    two = PythonStep("two_instances", ps.sleep_20ms, inputs=_t("x"), outputs=_t("y"), max_batch_size=8,
                     instance_group=InstanceGroup("CPU", count=2))(x)
    ens.output("Z", PythonStep("join", ps.join, inputs=[*_t("a"), *_t("b")],
                               outputs=_t("z"), max_batch_size=8)(one, two))
    ens.sample("ones", {"X": np.ones((1, 4), np.float32)}, {"Z": np.full((1, 4), 2, np.float32)})
    return ens


def step(profile: Profile, suffix: str) -> StepProfile:
    return next(s for s in profile.steps if s.model.endswith(suffix))


@pytest.fixture(scope="module")
def archives(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("profile")
    return {e.name: build_ensemble(e, out, "local") for e in (branches(), instances())}


@pytest.fixture(scope="module")
def profiles(archives: dict[str, Path]) -> dict[str, Profile]:
    """Both archives profiled on one local tritonserver: branches one request at a time, instances at 8."""
    def load_for(manifest: Manifest) -> Load:
        concurrency = 8 if manifest.ensemble == "instances" else 1
        return Load(sample_bodies(manifest), "the sample", 40 if concurrency == 1 else 64, concurrency)

    found = profile_archives(list(archives.values()), load_for)
    return {p.ensemble.removesuffix(".tar.gz"): p for p in found}


def test_the_40ms_branch_is_critical_and_the_5ms_branch_has_its_slack(profiles: dict[str, Profile]) -> None:
    p = profiles["branches"]
    slow, fast, join = step(p, "slow40"), step(p, "fast5"), step(p, "join")
    assert p.chain == (slow.model, join.model)
    assert slow.critical and join.critical and not fast.critical
    # the sleeps are floors: slow40 takes at least 40 ms, fast5 at least 5 ms; the slack is their difference
    assert slow.figures.compute_infer_ms >= 40 and fast.figures.compute_infer_ms >= 5
    assert fast.slack_ms == pytest.approx(slow.figures.work_ms - fast.figures.work_ms, abs=0.01)
    # so the slack is 35 ms plus what this machine added to slow40, less what it added to fast5: it is held to
    # the measured works above, never to 35 ms (a bound of 35 less one shared noise failed run 4 of issue 40's
    # five, when fast5 was the busier: slack 32.96 ms)
    # parallel branches are not added up: end to end is the critical path plus the scheduler, within the
    # spread the run itself shows (p99 - p50 of the ensemble's request time)
    spread = p.quantiles["request"]["p99"] - p.quantiles["request"]["p50"]
    assert abs(p.e2e_ms - p.path.length_ms) <= max(spread, 1.0)
    assert p.e2e_ms < p.path.length_ms + fast.figures.work_ms
    assert p.overhead_ms == pytest.approx(p.e2e_ms - p.path.length_ms)
    assert any("slack" in f.figure for f in fast.findings)
    assert all(s.figures.requests == 40 for s in p.steps) and p.figures.requests == 40
    # one request traced: the two branches ran side by side, and join started once both had answered
    assert p.traced is not None
    spans = {s.model: s.ms for s in p.traced.steps}
    assert spans[fast.model]["REQUEST_END"] < spans[slow.model]["COMPUTE_OUTPUT_START"]
    assert spans[join.model]["REQUEST_START"] >= spans[slow.model]["COMPUTE_OUTPUT_START"]
    assert spans[join.model]["REQUEST_END"] <= p.traced.end_to_end_ms


def test_queue_dominates_the_single_instance_step_and_a_second_instance_drops_it(
        profiles: dict[str, Profile]) -> None:
    p = profiles["instances"]
    one, two = step(p, "one_instance"), step(p, "two_instances")
    assert one.config.instances == 1 and two.config.instances == 2
    assert one.figures.queue_share > 0.5
    assert two.figures.queue_share < one.figures.queue_share / 2  # ratios within one run
    queue = [f for f in one.findings if f.figure.startswith("queue time")]
    assert queue and "add an instance (it has 1) or enable dynamic batching" in queue[0].advice
    assert f"{one.figures.queue_share:.0%} of this step's" in queue[0].figure
    assert not any(f.figure.startswith("queue time") for f in two.findings)
    assert p.run.concurrency == 8 and p.figures.requests == 64


def test_json_holds_every_figure(profiles: dict[str, Profile]) -> None:
    doc = json.loads(json.dumps(profiles["branches"].to_json()))
    first = doc["steps"][0]
    for key in ("requests", "executions", "batch_size_achieved", "queue_ms", "compute_input_ms", "compute_infer_ms",
                "compute_output_ms", "share", "slack_ms", "critical", "percentiles_ms", "findings"):
        assert key in first
    assert set(first["percentiles_ms"]["request"]) == {"p50", "p99"}
    assert doc["critical_path"]["steps"][0].endswith("slow40")
    assert doc["scheduler_overhead_ms"] == pytest.approx(doc["end_to_end_ms"] - doc["critical_path"]["length_ms"],
                                                         abs=0.01)
    assert doc["findings"] and all("text" in f for f in doc["findings"])


def test_url_profiles_a_server_of_the_users_and_the_cli_draws_the_pictures(
        archives: dict[str, Path], triton: LocalTriton, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    archive = archives["branches"]
    MultiModelClient(triton.sagemaker_url, triton.http_url).load(archive.name, stage(archive, triton), 120)
    out = tmp_path / "pictures"
    code = main(["profile", "--url", triton.http_url, "--model", archive.name, str(archive), "--requests", "10",
                 "--format", "svg", "--out", str(out), "--json"])
    assert code == 0
    doc = json.loads(capfd.readouterr().out)["profiles"][0]
    assert doc["critical_path"]["steps"][0].endswith("slow40")
    assert doc["percentiles_ms"] == {}  # no --metrics-url: means only, and the report says where p50/p99 come from
    assert "summary metrics" in doc["percentiles_note"]
    with pytest.raises(ServeError, match=f"{triton.http_url} has no model 'nothing' loaded .*\\(--model\\)"):
        StatsEndpoint(triton.http_url).config("nothing")
    svg = Path(doc["pictures"]["graph"]).read_text()
    assert "critical path" in svg and "slack" in svg
    assert Path(doc["pictures"]["waterfall"]).read_bytes().startswith(b"\x89PNG")


def test_mme_profiles_through_the_sagemaker_front(archives: dict[str, Path]) -> None:
    found = profile_archives([archives["branches"]], lambda m: Load(sample_bodies(m), "the sample", 10, 2), mode="mme")
    p = found[0]
    assert p.run.server.startswith("the local MME")
    assert p.chain[0].endswith("slow40") and p.figures.requests == 10


def test_replay_profiles_each_archive_on_the_server_that_replayed_it(
        archives: dict[str, Path], capfd: pytest.CaptureFixture[str]) -> None:
    archive = archives["branches"]
    assert main(["replay", str(archive), "--endpoint", "kserve", "--profile", "--requests", "10", "--json"]) == 0
    doc = json.loads(capfd.readouterr().out)
    assert doc["passed"] and doc["profiles"][0]["critical_path"]["steps"][0].endswith("slow40")
    assert set(doc["profiles"][0]["percentiles_ms"]["request"]) == {"p50", "p99"}


@pytest.mark.slow
def test_bench_writes_a_profile_section_into_bench_json(archives: dict[str, Path], tmp_path: Path) -> None:
    archive = archives["branches"]
    assert main(["bench", str(archive), "--triton", "--stages", "test", "--workers", "1", "--profile",
                 "--out", str(tmp_path)]) == 0
    bench = json.loads((tmp_path / "bench.json").read_text())
    profile = bench["profile"][0]
    assert profile["ensemble"] == archive.name and profile["run"]["concurrency"] == 4
    # the server counts every request of the load (the bench's summary only those inside its stages)
    assert profile["ensemble_figures"]["requests"] >= bench["requests"] - bench["failures"] > 0
    assert profile["critical_path"]["steps"][0].endswith("slow40")


def test_url_of_a_running_mme_front_with_its_tritons_stats(archives: dict[str, Path], tmp_path: Path,
                                                           capfd: pytest.CaptureFixture[str]) -> None:
    from conch.endpoint import LocalMME

    archive = archives["branches"]
    (tmp_path / "source").mkdir()
    (tmp_path / "source" / archive.name).write_bytes(archive.read_bytes())
    with LocalMME(tmp_path / "source") as mme:  # nothing loaded: the warm-up's first call loads it
        code = main(["profile", "--url", mme.url, "--stats-url", mme.triton.http_url, str(archive), "--requests", "8",
                     "--json"])
        assert code == 0, capfd.readouterr().err
    doc = json.loads(capfd.readouterr().out)["profiles"][0]
    assert doc["ensemble"] == archive.name and doc["ensemble_figures"]["requests"] == 8
    assert doc["critical_path"]["steps"][0].endswith("slow40")


def test_an_archive_that_cannot_load_is_reported_and_the_others_are_profiled(
        archives: dict[str, Path], tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "broken.tar.gz"
    broken.write_bytes(b"not a tar file")
    assert main(["profile", str(broken), str(archives["branches"]), "--requests", "5", "--json"]) == 2
    out, err = capfd.readouterr()
    doc = json.loads(out)
    assert doc["failed"] == ["broken.tar.gz"] and doc["profiles"][0]["ensemble"] == "branches.tar.gz"
    assert f"conch: error: archive {broken} is not a readable" in err
    assert "conch: 1 of 2 ensembles or archives were not profiled: broken.tar.gz" in err
