"""The ensemble's wiring re-checked from its config.pbtxt files alone, as Triton checks it at load."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence

from conch.archive.check_report import CheckReport, Model
from conch.compiler.config_reader import WrittenTensor
from conch.ensembles.layout import EnsembleStepSpec

_NOT_ON_ENSEMBLES = ("instance_group", "dynamic_batching", "model_warmup")

# A tensor in the ensemble's scope: data type (Triton's name), full shape (batch dimension included as -1), who
# writes it.
Produced = tuple[str, list[int], str]


def _full(dims: Sequence[int], max_batch_size: int) -> list[int]:
    return ([-1] if max_batch_size > 0 else []) + list(dims)


def _compatible(a: Sequence[int], b: Sequence[int]) -> bool:
    return len(a) == len(b) and all(x == y or x == -1 or y == -1 for x, y in zip(a, b, strict=True))


def check_wiring(ensemble: Model, models: dict[str, Model], report: CheckReport) -> None:
    """Every step's model present, inputs mapped, each tensor written once, dtypes/dims/batching agreeing."""
    file, config = f"{ensemble.folder}/config.pbtxt", ensemble.config
    # conch's typed settings do not model these on an ensemble: the reader carries them
    present = {f.name for f, _ in config.carried.ListFields()}
    for name in _NOT_ON_ENSEMBLES:
        if name in present:
            report.error(file, f"sets {name}, which Triton refuses on an ensemble; set it on the steps' models")
    batch = config.max_batch_size
    produced: dict[str, Produced] = {t.name: (t.data_type, _full(t.dims, batch), f"ensemble input {t.name!r}")
                                     for t in config.io("input")}
    steps = [(s, models.get(s.model_name)) for s in config.ensemble_steps]
    if not steps:
        report.error(file, "has no ensemble_scheduling steps")
    for step, model in steps:
        if model is None or model is ensemble:
            report.error(file, f"step model {step.model_name!r} has no folder with a config.pbtxt in the archive; "
                         "every step's model must be in the same archive")
            continue
        if batch > 0 and model.config.max_batch_size < batch:
            report.error(file, f"max_batch_size {batch} exceeds step {model.folder!r}'s max_batch_size "
                         f"{model.config.max_batch_size}; lower the ensemble's or raise the step's")
        _outputs(step, model, produced, report, file)
    for step, model in steps:
        if model is not None and model is not ensemble:
            _inputs(step, model, produced, report, file)
    for out in config.io("output"):
        src = produced.get(out.name)
        if src is None:
            report.error(file, f"ensemble output {out.name!r} is written by no step's output_map")
            continue
        _agree(f"ensemble output {out.name!r}", out.data_type, _full(out.dims, batch), src, report, file)


def _outputs(step: EnsembleStepSpec, model: Model, produced: dict[str, Produced], report: CheckReport,
             file: str) -> None:
    for key, value, spec in _mapped("output", dict(step.output_map), model.config.io("output"), model, report,
                                    file):
        if value in produced:
            report.error(file, f"tensor {value!r} is written by both {produced[value][2]} and output {key!r} of "
                         f"step {model.folder!r}; each tensor is written once")
        else:
            full = _full(spec.dims, model.config.max_batch_size)
            produced[value] = (spec.data_type, full, f"output {key!r} of step {model.folder!r}")


def _inputs(step: EnsembleStepSpec, model: Model, produced: dict[str, Produced], report: CheckReport,
            file: str) -> None:
    input_map = dict(step.input_map)
    for key, value, spec in _mapped("input", input_map, model.config.io("input"), model, report, file):
        src = produced.get(value)
        if src is None:
            report.error(file, f"step {model.folder!r} input {key!r} reads tensor {value!r}, which is neither an "
                         "ensemble input nor written by any step")
            continue
        full = _full(spec.dims, model.config.max_batch_size)
        _agree(f"step {model.folder!r} input {key!r}", spec.data_type, full, src, report, file)
    for spec in model.config.io("input"):
        if spec.name not in input_map and not spec.optional:
            report.error(file, f"step {model.folder!r}: required input {spec.name!r} is not in its input_map")


def _mapped(kind: str, mapping: Mapping[str, str], declared: Iterable[WrittenTensor], model: Model,
            report: CheckReport, file: str) -> Iterator[tuple[str, str, WrittenTensor]]:
    """``(key, tensor, spec)`` for each entry of a step's input_map or output_map whose key the model
    declares as one of its ``kind``s; the other keys are reported."""
    specs: dict[str, WrittenTensor] = {s.name: s for s in declared}
    for key, value in mapping.items():
        spec = specs.get(key)
        if spec is None:
            report.error(file, f"step {model.folder!r}: {kind}_map key {key!r} is not an {kind} of that model "
                         f"(its {kind}s: {', '.join(sorted(specs)) or 'none'})")
        else:
            yield key, value, spec


def _agree(what: str, dtype: str, shape: list[int], src: Produced, report: CheckReport, file: str) -> None:
    if dtype != src[0]:
        report.error(file, f"{what} is {dtype} but {src[2]} is {src[0]}")
    elif not _compatible(shape, src[1]):
        report.error(file, f"{what} has shape {shape} but {src[2]} has shape {src[1]} (batch included; -1 matches "
                     "any size)")
