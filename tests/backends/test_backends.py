"""Every backend, the same checks: its config parses as ModelConfig, its production layout uses Triton's
file names, its local stand-in keeps name and I/O and answers in the real tritonserver, and wrong
declarations fail at build naming the cause."""

from __future__ import annotations

from pathlib import Path

import pytest
from cases import CASES, BackendCase
from google.protobuf import text_format
from round_trip import ensemble_config, step_config
from tritonclient.grpc import model_config_pb2

from conch import ConchError, DynamicBatching, Ensemble, InstanceGroup, Release, Target, VersionPolicy, Warmup
from conch.builder.repository_build import build_ensemble, render_repository
from conch.compiler.config_reader import read_config
from conch.ensembles.config import StepSettings
from conch.ensembles.step import Step
from conch.replays.local_replay import replay_archives

IDS = [c.kind for c in CASES]


def single_step_ensemble(case: BackendCase, tmp: Path, name: str = "single", keep_ensemble: bool = False) -> Ensemble:
    step = case.make(tmp)
    mbs = step.max_batch_size
    ens = Ensemble(name, max_batch_size=mbs, keep_ensemble=keep_ensemble)
    handles = {t.name: ens.input(t.name.upper().replace("/", "_"), t.dtype, t.dims) for t in step.inputs}
    outs = step(**handles)
    outs = [outs] if not isinstance(outs, tuple) else list(outs)
    for spec, handle in zip(step.outputs, outs, strict=True):
        ens.output(spec.name.upper().replace("/", "_"), handle)
    inputs = {k.upper().replace("/", "_"): v for k, v in case.inputs.items()}
    expected = {k.upper().replace("/", "_"): v for k, v in case.expected.items()}
    from conch import Tolerance

    ens.sample("case", inputs, expected, Tolerance(atol=case.atol, rtol=case.atol))
    return ens


def configs(repo_files: dict[str, object]) -> dict[str, model_config_pb2.ModelConfig]:
    out = {}
    for name, data in repo_files.items():
        if name.endswith("/config.pbtxt"):
            config = model_config_pb2.ModelConfig()
            assert isinstance(data, bytes)
            text_format.Parse(data.decode(), config)
            out[name.split("/")[0]] = config
    return out


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_production_layout_and_config(case: BackendCase, tmp_path: Path) -> None:
    ens = single_step_ensemble(case, tmp_path)
    repo = render_repository(ens, Target.PRODUCTION, Release.of("24.10"))
    model = "single__" + ens.calls[0].step.name
    config = configs(repo.files)[model]
    assert case.served_as in (config.platform, config.backend)
    files = {n[len(model) + 1:] for n in repo.files if n.startswith(model + "/") and not n.endswith("/")}
    assert files - {"config.pbtxt"} == case.files


def with_every_setting(step: Step) -> Step:
    """The step with a value for every setting a step takes (its own parameters kept)."""
    step.settings = StepSettings.of(
        step.max_batch_size, instance_group=[InstanceGroup("KIND_GPU", count=2, gpus=(0,)), InstanceGroup("cpu")],
        dynamic_batching=DynamicBatching((4, 8), 100, preserve_ordering=True),
        parameters={**step.settings.parameters, "round": 'trip "quoted"'}, warmup=Warmup("zeros", batch_size=2),
        version_policy=VersionPolicy(latest=1),
    )
    return step


@pytest.mark.parametrize("case", CASES, ids=IDS)
@pytest.mark.parametrize("settings", ["declared", "every setting"])
def test_rendered_configs_mean_what_was_declared(case: BackendCase, settings: str, tmp_path: Path) -> None:
    """Each config.pbtxt, parsed as ModelConfig, equals the config built from the declaration field by field:
    the step's in production, and the ensemble's wiring (kept: a one-step DAG may be written as its model alone)."""
    ens = single_step_ensemble(case, tmp_path, keep_ensemble=True)
    call = ens.calls[0]
    if settings == "every setting":
        with_every_setting(call.step)
    found = configs(render_repository(ens, Target.PRODUCTION, Release.of("24.10")).files)
    model = ens.model_name(call.step)
    assert found[model] == step_config(model, call.step)
    assert found["single"] == ensemble_config(ens)
    # conch's config reader gives back the typed spec that was declared, with nothing carried untyped
    assert read_config(found[model]).spec == call.step.spec(model)
    assert read_config(found["single"]).spec == ens.spec()


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_local_standin_keeps_name_and_io(case: BackendCase, tmp_path: Path) -> None:
    ens = single_step_ensemble(case, tmp_path)
    model = "single__" + ens.calls[0].step.name
    prod = configs(render_repository(ens, Target.PRODUCTION, Release.of("24.10")).files)[model]
    local = configs(render_repository(ens, Target.LOCAL, Release.of("24.10")).files)[model]
    assert local.backend == "python" and local.name == prod.name
    assert list(local.input) == list(prod.input) and list(local.output) == list(prod.output)
    assert local.max_batch_size == prod.max_batch_size


WRONG = [(c, i) for c in CASES for i in range(len(c.wrong))]


@pytest.mark.parametrize(("case", "index"), WRONG, ids=[f"{c.kind}-{i}" for c, i in WRONG])
def test_wrong_declarations_fail_at_build(case: BackendCase, index: int, tmp_path: Path) -> None:
    make, pattern = case.wrong[index]
    with pytest.raises(ConchError, match=pattern):
        step = make(tmp_path)
        ens = Ensemble("wrong", max_batch_size=step.max_batch_size)
        handles = {t.name: ens.input(t.name.upper(), t.dtype, t.dims) for t in step.inputs}
        outs = step(**handles)
        for i, h in enumerate([outs] if not isinstance(outs, tuple) else outs):
            ens.output(f"OUT{i}", h)
        build_ensemble(ens, tmp_path / "dist", Target.PRODUCTION, "24.10")
    dist = tmp_path / "dist"
    assert not dist.exists() or not list(dist.iterdir()), "a failed build left files behind"


@pytest.mark.integration
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_local_standin_answers_in_tritonserver(case: BackendCase, tmp_path: Path, triton) -> None:  # type: ignore[no-untyped-def]
    ens = single_step_ensemble(case, tmp_path, name=f"standin_{case.kind}")
    archive = build_ensemble(ens, tmp_path, Target.LOCAL, "24.10")
    report = replay_archives([archive], server=triton, endpoints=["kserve", "sagemaker-binary"])
    assert report.passed, report.table()
    assert {r.endpoint for r in report.rows} == {"load", "kserve", "sagemaker-binary"}  # each one answered
