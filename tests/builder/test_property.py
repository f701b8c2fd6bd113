"""Property: any valid linear or branching DAG renders configs that parse as ModelConfig, with
ensemble tensor maps that Triton's scheduler can follow."""

from __future__ import annotations

import basic_steps
from google.protobuf import text_format
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tritonclient.grpc import model_config_pb2

from conch import DynamicBatching, Ensemble, InstanceGroup, PythonStep, Tensor, Warmup
from conch.builder.repository_build import render_repository
from conch.ensembles.ensemble import TensorHandle

DTYPES = ["FP32", "FP16", "INT64", "INT32", "UINT8", "BOOL", "BYTES"]
dims_st = st.lists(st.sampled_from([-1, 1, 3, 16]), min_size=1, max_size=3)
text_st = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12)


@st.composite
def dags(draw: st.DrawFn) -> Ensemble:
    mbs = draw(st.sampled_from([0, 4, 8]))
    ens = Ensemble(f"dag{draw(st.integers(0, 999))}", max_batch_size=mbs)
    pool: list[TensorHandle] = []
    for i in range(draw(st.integers(1, 3))):
        pool.append(ens.input(f"IN_{i}", draw(st.sampled_from(DTYPES)), draw(dims_st)))
    unused_inputs = list(pool)
    n_steps = max(draw(st.integers(1, 6)), len(pool))
    for s in range(n_steps):
        # ensemble inputs are consumed first; later steps read any earlier handle (chains and branches)
        if unused_inputs:
            chosen = [unused_inputs.pop(0)]
        else:
            k = draw(st.integers(1, min(2, len(pool))))
            chosen = draw(st.lists(st.sampled_from(pool), min_size=k, max_size=k, unique_by=id))
        step_mbs = draw(st.sampled_from([mbs, 8])) if mbs else 0
        inputs = [Tensor(f"i{j}", h.dtype, [d if draw(st.booleans()) else -1 for d in h.dims])
                  for j, h in enumerate(chosen)]
        n_out = draw(st.integers(1, 2))
        outputs = [Tensor(f"o{j}", draw(st.sampled_from(DTYPES)), draw(dims_st)) for j in range(n_out)]
        kwargs = {}
        if step_mbs and draw(st.booleans()):
            kwargs["dynamic_batching"] = DynamicBatching(preferred_batch_size=(2,), max_queue_delay_microseconds=50)
        if draw(st.booleans()):
            kwargs["instance_group"] = InstanceGroup(draw(st.sampled_from(["KIND_CPU", "KIND_GPU"])), 2)
        if all(d > 0 for t in inputs for d in t.dims) and draw(st.booleans()):
            kwargs["warmup"] = Warmup("w", batch_size=1)
        step = PythonStep(f"s{s}", basic_steps.double, inputs=inputs, outputs=outputs, max_batch_size=step_mbs,
                          parameters={draw(text_st) or "k": draw(text_st)}, **kwargs)
        result = step(*chosen)
        pool.extend(result if isinstance(result, tuple) else [result])
    consumed = {id(h) for c in ens.calls for h in c.inputs.values()}
    for n, h in enumerate(h for h in pool if h.producer is not None and id(h) not in consumed):
        ens.output(f"OUT_{n}", h)
    return ens


def parse(text: bytes) -> model_config_pb2.ModelConfig:
    config = model_config_pb2.ModelConfig()
    text_format.Parse(text.decode(), config)
    return config


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dags(), st.sampled_from(["production", "local"]))
def test_random_dags_render_parseable_configs(ens: Ensemble, target: str) -> None:
    repo = render_repository(ens, target, "24.10")
    configs = {n.split("/")[0]: parse(d) for n, d in repo.files.items() if n.endswith("/config.pbtxt")}  # type: ignore[arg-type]
    ensemble = configs.pop(ens.name)
    assert ensemble.platform == "ensemble"
    for name, config in configs.items():
        assert config.name == name and config.backend == "python"
    available = {t.name for t in ensemble.input}
    written: set[str] = set()
    for step in ensemble.ensemble_scheduling.step:
        assert step.model_name in configs
        model = configs[step.model_name]
        assert set(step.input_map) <= {t.name for t in model.input}
        assert set(step.input_map.values()) <= available, "a step reads a tensor no earlier step wrote"
        assert set(step.output_map) <= {t.name for t in model.output}
        for value in step.output_map.values():
            assert value not in written and value not in {t.name for t in ensemble.input}, "written twice"
            written.add(value)
        available |= set(step.output_map.values())
    assert {t.name for t in ensemble.output} <= written
