"""Triton's load rules: every refusal Triton's model loading applies to a repository's configs, read from its
sources (core r24.10 = server 2.51 as the baseline; docs/load-rules.md lists each rule with its source, the
releases it holds for and its test), applied to a plain description of a repository so that any reader (an
archive, a folder) can feed it.

Triton stops at the first error of a load; conch names every cause in one run, in the order Triton meets them:
the served model's own config (autofill, ValidateModelConfig, ValidateModelIOConfig, the folder name), then its
ensemble steps (missing, their own configs, their versions), then the ensemble's wiring (ValidateEnsembleConfig).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from conch.ensembles.backends_table import AUTOFILL_ENTRIES, BY_NAME, PLATFORM_BACKENDS
from conch.ensembles.target import DEFAULT_RELEASE, Release

ENSEMBLE = "ensemble"
# core src/constants.h: sub-folders of a model folder that are never versions (kWarmupDataFolder, ...)
NOT_VERSIONS = ("warmup", "initial_state", "configs")
# core AutoCompleteBackendFields: the file in the first version folder that names a backend, in Triton's order,
# and GetBackendTypeFromPlatform / GetBackendType: read from the one table of backends (ensembles/backends_table.py)
_FILENAME_BACKENDS = {entry.rstrip("/"): backend for entry, backend, _ in AUTOFILL_ENTRIES}
# ModelConfig fields by the release whose proto first has them (common protobuf/model_config.proto at each rYY.MM
# tag); a config using one does not parse on an older release
FIELDS_SINCE = {
    "ModelEnsembling.Step.model_namespace": "23.03", "ModelSequenceBatching.StrategyOldest.preserve_ordering": "23.08",
    "ModelSequenceBatching.State.use_growable_memory": "23.11",
    "ModelSequenceBatching.State.use_same_buffer_for_input_output": "23.11",
    "ModelSequenceBatching.iterative_sequence": "23.11", "ModelConfig.runtime": "24.01",
    "ModelInput.is_non_linear_format_io": "24.08", "ModelOutput.is_non_linear_format_io": "24.08",
    "ModelConfig.model_metrics": "24.11", "ModelEnsembling.max_inflight_requests": "25.11",
}


class Report(Protocol):
    """Where findings go (conch.archive.check_report.CheckReport)."""

    def error(self, file: str, message: str) -> None: ...


@dataclass(frozen=True)
class ModelFolder:
    """One model folder of a repository as Triton reads it: its config (Triton's ModelConfig message, as written)
    and its sub-folders, each with the names of its entries (a folder's name ends in '/')."""

    folder: str
    config: Any
    subdirs: Mapping[str, frozenset[str]]
    prefix: str | None = None  # where its files are in the archive (None: ``folder/``; "" for a root config.pbtxt)

    @classmethod
    def read(cls, path: Path, config: Any) -> ModelFolder:
        """The description of the model folder at ``path`` whose config.pbtxt parsed into ``config``."""
        subdirs = {}
        for sub in path.iterdir():
            if sub.is_dir() and not sub.is_symlink():
                subdirs[sub.name] = frozenset(e.name + ("/" if e.is_dir() else "") for e in sub.iterdir())
        return cls(path.name, config, subdirs)

    @property
    def where(self) -> str:
        return f"{self.folder}/" if self.prefix is None else self.prefix

    @property
    def file(self) -> str:
        return f"{self.where}config.pbtxt"

    def versions(self) -> list[int]:
        """The version folders Triton finds (core model_lifecycle.cc VersionsToLoad): integral names without a
        leading zero, newest first; ``std::stoll`` reads a leading number ('2abc' is version 2)."""
        found = set()
        for name in self.subdirs:
            if name in NOT_VERSIONS or (len(name) > 1 and name[0] == "0"):
                continue
            number = _stoll(name)
            if number is not None:
                found.add(number)
        return sorted(found, reverse=True)

    def versions_to_load(self) -> list[int]:
        """The versions the config's version_policy loads from those present (latest 1 when none is set)."""
        existing = self.versions()
        policy = self.config.version_policy
        which = policy.WhichOneof("policy_choice")
        if which == "specific":
            return sorted(v for v in set(policy.specific.versions) if v in existing)
        if which == "all":
            return existing
        count = policy.latest.num_versions if which == "latest" else 1
        return existing[:count]


def _stoll(text: str) -> int | None:
    digits = len(text) - len(text.lstrip("+-"))
    end = digits
    while end < len(text) and text[end].isdigit():
        end += 1
    return int(text[:end]) if end > digits and digits <= 1 else None


def check_load(models: Mapping[str, ModelFolder], served: str, report: Report,
               release: Release | str = DEFAULT_RELEASE, mapped: bool = False) -> None:
    """Every cause for which Triton (``release``) refuses to load the model folder ``served`` of ``models`` (the
    repository's model folders by name) with what it depends on, in the order Triton meets them. ``mapped``: the
    served folder is loaded under another name (SageMaker's TargetModel, a model mapping: core
    model_repository_manager.cc), so its config's name need not equal its folder."""
    _load(models, served, report, Release.of(release), set(), mapped)


def _is_ensemble(model: ModelFolder) -> bool:
    return bool(model.config.platform == ENSEMBLE and model.config.HasField("ensemble_scheduling"))


def _load(models: Mapping[str, ModelFolder], served: str, report: Report, release: Release,
          seen: set[str], mapped: bool = False) -> list[int]:
    """The checks of one model and, for an ensemble, its steps (nested ensembles too); the versions Triton would
    load of it ([] when it refuses it)."""
    seen.add(served)
    model = models[served]
    own = check_config(model, report, release, mapped)
    versions = _check_versions(model, report)
    if not _is_ensemble(model):
        return versions if own else []
    steps = list(model.config.ensemble_scheduling.step)
    missing = sorted({s.model_name for s in steps if s.model_name and s.model_name not in models})
    if missing:
        report.error(model.file, f"step model(s) {', '.join(missing)} have no folder with a config.pbtxt in the "
                     "archive (Triton: 'contains models that are not available'); every step's model must be in "
                     "the same archive")
    loop = _cycle(models, served, [served])
    if len(loop) > 2:
        report.error(model.file, f"its steps lead back to it ({' -> '.join(loop)}): Triton refuses circular "
                     "dependencies between ensembles; break the loop")
    loaded: dict[str, list[int]] = {}
    for name in dict.fromkeys(s.model_name for s in steps if s.model_name in models):
        if name == served:
            report.error(model.file, f"step model {name!r} is the ensemble itself; a step runs another model")
        elif name not in seen:
            loaded[name] = _load(models, name, report, release, seen)
    for s in steps:
        have = loaded.get(s.model_name)
        if have and s.model_version != -1 and s.model_version not in have:
            report.error(model.file, f"step model {s.model_name!r} asks for model_version {s.model_version}, but "
                         f"Triton loads version(s) {', '.join(map(str, have))} of it (its folders and "
                         "version_policy); add that version folder, or set model_version: -1 (the one loaded)")
    ready = own and bool(versions) and not missing and len(loop) <= 2 and all(loaded.values())
    if own:
        before = _count(report)
        _check_wiring(model, [(s, models[s.model_name]) for s in steps if loaded.get(s.model_name)], report)
        ready = ready and _count(report) == before
    return versions if ready else []


def _cycle(models: Mapping[str, ModelFolder], start: str, path: list[str]) -> list[str]:
    """A path of ensemble steps from ``path[-1]`` back to ``start`` ([] when there is none)."""
    for step in models[path[-1]].config.ensemble_scheduling.step:
        name = step.model_name
        if name == start:
            return [*path, name]
        if name in models and name not in path and _is_ensemble(models[name]):
            found = _cycle(models, start, [*path, name])
            if found:
                return found
    return []


def _check_versions(model: ModelFolder, report: Report) -> list[int]:
    versions = model.versions_to_load()
    if not versions:
        present = model.versions()
        report.error(model.where, "has no version folder Triton loads under its version_policy (Triton: 'at "
                     "least one version must be available under the version policy'); found "
                     f"{', '.join(map(str, present)) or 'no version folders'}: add 1/ or make the policy name one")
    return versions


# -- one config on its own: core model_config_utils.cc ------------------------------------------------------


def check_config(model: ModelFolder, report: Report, release: Release | str = DEFAULT_RELEASE,
                 mapped: bool = False) -> bool:
    """One model's own config as Triton checks it before loading (autofill, ValidateModelConfig,
    ValidateModelIOConfig, the instance groups, the folder name unless ``mapped``); whether it passed."""
    before = _count(report)
    config, file = model.config, model.file
    _fields_known(config, file, Release.of(release), report)
    platform, backend = _autofilled(model, report)
    if backend is None:
        return False
    if not backend and platform != ENSEMBLE:
        report.error(file, f"platform {platform!r} is not one Triton runs by itself and no backend is set; set "
                     "backend (e.g. backend: \"python\") or a known platform (onnxruntime_onnx, tensorrt_plan, "
                     "pytorch_libtorch, tensorflow_graphdef, tensorflow_savedmodel, ensemble)")
    elif backend and platform == ENSEMBLE:
        report.error(file, f"sets backend {backend!r} on an ensemble; Triton wants platform \"ensemble\" and no "
                     "backend: remove the backend line")
    elif backend in BY_NAME and BY_NAME[backend].platforms and platform not in BY_NAME[backend].platforms:
        report.error(file, f"pairs platform {platform!r} with backend {backend!r}, which Triton refuses; use "
                     f"platform {BY_NAME[backend].platforms[0]!r} or drop the platform")
    if config.max_batch_size < 0:
        report.error(file, f"max_batch_size {config.max_batch_size} is negative; use 0 (no batching) or more")
    _batching(config, file, report)
    if config.HasField("ensemble_scheduling"):
        _ensemble_scheduling(config, file, report)
    elif platform == ENSEMBLE:
        report.error(file, "is an ensemble without ensemble_scheduling; add its steps (ensemble_scheduling { step "
                     "[...] })")
    if config.model_transaction_policy.decoupled and config.response_cache.enable:
        report.error(file, "enables response_cache on a decoupled model, which Triton refuses; disable one")
    _io(config, platform, file, report)
    if config.name and config.name != model.folder and not mapped:
        report.error(file, f"names model {config.name!r}, but its folder is {model.folder!r}; Triton refuses a "
                     "config whose name differs from its folder: make them equal")
    # what the backend's model refuses when it is created, after the repository accepted the config
    if not config.HasField("ensemble_scheduling"):
        _instance_groups(config, platform, file, report)
    force = config.parameters.get("FORCE_CPU_ONLY_INPUT_TENSORS")
    if backend == "python" and force is not None and force.string_value not in ("yes", "no"):
        # python_backend src/python_be.cc ModelState
        report.error(file, f"parameter FORCE_CPU_ONLY_INPUT_TENSORS is {force.string_value!r}; the Python backend "
                     "takes \"yes\" or \"no\" only")
    return _count(report) == before


def _count(report: Report) -> int:
    findings = getattr(report, "findings", None)
    return len(findings) if findings is not None else 0


def _fields_known(config: Any, file: str, release: Release, report: Report) -> None:
    for path, since in FIELDS_SINCE.items():
        if release < Release.of(since) and _has_field(config, path):
            report.error(file, f"sets {path.split('.')[-1]} ({path}), which Triton {release} does not know (its "
                         f"ModelConfig has it from {since}) and so refuses to parse; remove it or target {since} "
                         "or later")


def _has_field(config: Any, path: str) -> bool:
    kind, *rest = path.split(".")
    holders = {"ModelConfig": [config], "ModelInput": list(config.input), "ModelOutput": list(config.output),
               "ModelEnsembling": [config.ensemble_scheduling],
               "ModelSequenceBatching": [config.sequence_batching]}[kind]
    *inner, name = rest
    for part in inner:
        nxt: list[Any] = []
        for h in holders:
            value = getattr(h, _FIELD_OF.get(part, part))
            nxt.extend(value if hasattr(value, "__len__") and not isinstance(value, str) else [value])
        holders = nxt
    return any(_set(h, name) for h in holders)


_FIELD_OF = {"Step": "step", "StrategyOldest": "oldest", "State": "state"}


def _set(message: Any, name: str) -> bool:
    """Whether ``message`` sets field ``name`` (False for a field this proto does not have)."""
    field = message.DESCRIPTOR.fields_by_name.get(name)
    if field is None:
        return False
    repeated = field.is_repeated if hasattr(field, "is_repeated") else field.label == field.LABEL_REPEATED
    if repeated:
        return len(getattr(message, name)) > 0
    if field.message_type is not None:
        return bool(message.HasField(name))
    return bool(getattr(message, name))


def _autofilled(model: ModelFolder, report: Report) -> tuple[str, str | None]:
    """(platform, backend) after Triton's server-side autofill (core AutoCompleteBackendFields), which reads the
    platform, the backend, default_model_filename and the files of the first sub-folder; backend None when Triton
    cannot tell which backend runs the model (reported)."""
    config = model.config
    platform, backend, filename = config.platform, config.backend, config.default_model_filename
    if platform == ENSEMBLE or (platform and backend):
        return platform, backend
    known = BY_NAME.get(backend)
    if known is not None and not platform and len(known.platforms) == 1:  # a backend of one platform is given it
        return known.platforms[0], backend
    first = sorted(model.subdirs)[:1]
    files = model.subdirs[first[0]] if first else frozenset()
    if not backend and platform in PLATFORM_BACKENDS:
        return platform, PLATFORM_BACKENDS[platform]
    if not backend and filename in _FILENAME_BACKENDS:
        return platform, _FILENAME_BACKENDS[filename]
    if not backend and not platform and not filename:
        for entry, found, found_platform in AUTOFILL_ENTRIES:
            if entry in files:
                return found_platform, found
        if "." not in model.folder:
            report.error(model.file, "names no platform or backend, and its first version folder holds no model "
                         "file Triton recognises (model.py, model.onnx, model.pt, model.plan, model.graphdef, "
                         "model.savedmodel), so Triton cannot tell which backend runs it; set backend or platform")
            return platform, None
        return platform, model.folder.split(".", 1)[1]
    return platform, backend


def _batching(config: Any, file: str, report: Report) -> None:
    batch = config.max_batch_size
    if config.HasField("dynamic_batching"):
        dynamic = config.dynamic_batching
        for size in dynamic.preferred_batch_size:
            if size <= 0 or size > batch:
                report.error(file, f"dynamic_batching preferred_batch_size {size} must be between 1 and "
                             f"max_batch_size {batch}; fix the size or raise max_batch_size")
        levels = dynamic.priority_levels
        if levels and not 1 <= dynamic.default_priority_level <= levels:
            report.error(file, f"dynamic_batching default_priority_level {dynamic.default_priority_level} must be "
                         f"in [1, {levels}] (priority_levels {levels})")
        if levels and any(not 1 <= level <= levels for level in dynamic.priority_queue_policy):
            report.error(file, f"dynamic_batching priority_queue_policy names a level outside [1, {levels}]")
        if dynamic.preserve_ordering:
            if levels > 1:
                report.error(file, "dynamic_batching preserve_ordering allows one priority level only")
            policies = [dynamic.default_queue_policy, *dynamic.priority_queue_policy.values()]
            if any(p.default_timeout_microseconds and p.timeout_action == p.DELAY for p in policies):
                report.error(file, "dynamic_batching preserve_ordering cannot have a DELAY timeout_action")
    if config.HasField("sequence_batching"):
        sequence = config.sequence_batching
        if config.response_cache.enable:
            report.error(file, "enables response_cache with sequence_batching, which Triton refuses; disable one")
        for size in sequence.oldest.preferred_batch_size:
            if size <= 0 or size > batch:
                report.error(file, f"sequence_batching preferred_batch_size {size} must be between 1 and "
                             f"max_batch_size {batch}")
        if not 0.0 <= sequence.direct.minimum_slot_utilization <= 1.0:
            report.error(file, "sequence_batching minimum_slot_utilization must be in (0.0, 1.0]")


# -- an ensemble's own config: ValidateEnsembleSchedulingConfig and BuildEnsembleGraph ------------------------


def _ensemble_scheduling(config: Any, file: str, report: Report) -> None:
    if config.platform != ENSEMBLE:
        report.error(file, f"sets ensemble_scheduling on platform {config.platform!r}; only platform \"ensemble\" "
                     "schedules steps: set platform: \"ensemble\" or remove ensemble_scheduling")
    for name, what in (("instance_group", "instance_group"), ("optimization", "optimization"),
                       ("model_warmup", "model_warmup")):
        if _set(config, name):
            report.error(file, f"sets {what}, which Triton refuses on an ensemble; set it on the steps' models")
    steps = config.ensemble_scheduling.step
    if not steps:
        report.error(file, "has no ensemble_scheduling steps; add a step per model the ensemble runs")
        return
    written: dict[str, int] = {}
    read: dict[str, list[int]] = {}
    for i, step in enumerate(steps):
        where = f"step {i} ({step.model_name or 'no model_name'})"
        for part in ("model_name", "input_map", "output_map"):
            if not _set(step, part):
                report.error(file, f"{where} has no {part}; Triton needs every step to name its model and map its "
                             "inputs and outputs")
        for tensor in step.output_map.values():
            if tensor in written:
                by = f"twice by {where}" if written[tensor] == i else f"by both step {written[tensor]} and {where}"
                report.error(file, f"tensor {tensor!r} is written {by}; each ensemble tensor is written once: rename "
                             "one")
            written.setdefault(tensor, i)
        for tensor in step.input_map.values():
            read.setdefault(tensor, []).append(i)
    _data_flow(config, file, steps, written, read, report)


def _data_flow(config: Any, file: str, steps: Sequence[Any], written: Mapping[str, int],
               read: Mapping[str, list[int]], report: Report) -> None:
    inputs = [t.name for t in config.input]
    tensors = set(written) | set(read)
    for name in inputs:
        if name not in tensors:
            report.error(file, f"ensemble input {name!r} is read by no step; map it in a step's input_map or remove it")
    ready = {name for name in inputs if name in tensors}
    changed = True
    while changed:  # a step's outputs are ready once all its inputs are
        changed = False
        for step in steps:
            if step.output_map and all(t in ready for t in step.input_map.values()):
                new = set(step.output_map.values()) - ready
                if new:
                    ready |= new
                    changed = True
    outputs = set()
    for out in config.output:
        if out.name not in tensors:
            report.error(file, f"ensemble output {out.name!r} is written by no step's output_map")
        elif out.name not in ready:
            report.error(file, f"ensemble output {out.name!r} is not written: a tensor it depends on is neither an "
                         "ensemble input nor written by a step; connect it")
        outputs.add(out.name)
    for name in sorted(tensors - outputs - set(inputs)):
        if name not in ready:
            if name not in written:
                report.error(file, f"tensor {name!r} is read by step(s) {', '.join(map(str, read[name]))} but is "
                             "neither an ensemble input nor written by any step; write it or read another")
            continue
        if name not in read:
            report.error(file, f"tensor {name!r} written by step {written[name]} is read by no step and is not an "
                         "ensemble output; Triton refuses unused tensors: read it, make it an output, or drop it "
                         "from the output_map")


# -- tensors: ValidateModelIOConfig ----------------------------------------------------------------------------


def _io(config: Any, platform: str, file: str, report: Report) -> None:
    batch = config.max_batch_size
    for kind, tensors in (("input", config.input), ("output", config.output)):
        for t in tensors:
            what = f"{kind} {t.name!r}"
            if not t.name:
                report.error(file, f"an {kind} has no name; name every tensor")
                continue
            if t.data_type == 0:
                report.error(file, f"{what} has no data_type; set one (e.g. TYPE_FP32)")
            if not t.dims:
                report.error(file, f"{what} has no dims; Triton needs them: a scalar is dims: [ 1 ] with "
                             "reshape: { shape: [ ] }")
            if t.HasField("reshape") and not t.reshape.shape and batch == 0:
                report.error(file, f"{what} has an empty reshape in a non-batching model (a scalar Triton does not "
                             "support); give it a shape or batch the model")
            if any(d < 1 and d != -1 for d in t.dims):
                report.error(file, f"{what} dims {list(t.dims)}: each dimension is >= 1 or -1 (variable)")
            if t.HasField("reshape"):
                _reshape(t, what, file, report)
            if kind == "input" and t.format in (1, 2) and len(t.dims) != 3:  # FORMAT_NHWC, FORMAT_NCHW
                report.error(file, f"{what} has format NHWC/NCHW, which needs 3 dims, not {len(t.dims)}")
            if platform != "tensorrt_plan" and t.is_shape_tensor:
                report.error(file, f"{what} is a shape tensor, which only TensorRT models have")
            if _set(t, "is_non_linear_format_io") and (platform != "tensorrt_plan" or len(t.dims) != 3):
                report.error(file, f"{what} is non-linear format IO, which only TensorRT models have, with 3 dims")
    inputs = {t.name for t in config.input}
    outputs = {t.name for t in config.output}
    for b in config.batch_input:
        target = ", ".join(b.target_name)
        if len(b.source_input) != 1:
            report.error(file, f"batch_input {target!r} needs exactly 1 source_input")
        if b.data_type not in (8, 11):  # TYPE_INT32, TYPE_FP32
            report.error(file, f"batch_input {target!r} data_type must be TYPE_INT32 or TYPE_FP32")
        for source in b.source_input:
            if source not in inputs:
                report.error(file, f"batch_input source_input {source!r} is not an input of the model")
    for o in config.batch_output:
        for source in o.source_input:
            if source not in inputs:
                report.error(file, f"batch_output source_input {source!r} is not an input of the model")
        for target in o.target_name:
            if target not in outputs:
                report.error(file, f"batch_output target_name {target!r} is not an output of the model")


def _reshape(t: Any, what: str, file: str, report: Report) -> None:
    shape = list(t.reshape.shape)
    if any(d < 1 and d != -1 for d in shape):
        report.error(file, f"{what} reshape {shape}: each dimension is >= 1 or -1 (variable)")
        return
    if _chunks(t.dims) != _chunks(shape) and not (not shape and _chunks(t.dims) == [1]):
        report.error(file, f"{what}: dims {list(t.dims)} and reshape {shape} hold different numbers of elements "
                     "(counted between -1 dimensions); make them agree")


def _chunks(dims: Iterable[int]) -> list[int]:
    """Element counts between variable (-1) dimensions: what dims and reshape must share."""
    out, count = [], 1
    for d in dims:
        if d == -1:
            out.append(count)
            count = 1
        else:
            count *= d
    return [*out, count]


def _instance_groups(config: Any, platform: str, file: str, report: Report) -> None:
    for g in config.instance_group:
        name = g.name or "(unnamed)"
        if g.kind in (2, 3) and g.gpus:  # KIND_CPU, KIND_MODEL
            report.error(file, f"instance_group {name} is KIND_CPU/KIND_MODEL but lists gpus; drop the gpus")
        if g.profile and platform != "tensorrt_plan":
            report.error(file, f"instance_group {name} sets profile, which only TensorRT models have")


# -- the ensemble against its steps: ensemble_utils.cc ValidateEnsembleConfig -----------------------------------


@dataclass
class _Tensor:
    dtype: int
    dims: list[int]
    full: list[int]
    source: str


def _node(dtype: int, dims: Iterable[int], batching: bool, source: str) -> _Tensor:
    dims = list(dims)
    return _Tensor(dtype, dims, ([-1] if batching else []) + dims, source)


def _check_wiring(ensemble: ModelFolder, steps: list[tuple[Any, ModelFolder]], report: Report) -> None:
    config, file = ensemble.config, ensemble.file
    before = _count(report)
    batching = config.max_batch_size > 0
    tensors: dict[str, _Tensor] = {}
    for t in (*config.input, *config.output):
        kind = "input" if t in config.input else "output"
        dims = t.reshape.shape if t.HasField("reshape") else t.dims
        tensors.setdefault(t.name, _node(t.data_type, dims, batching, f"ensemble {kind} {t.name!r}"))
    for step, model in steps:
        step_config, name = model.config, model.folder
        if 0 < step_config.max_batch_size < config.max_batch_size:
            report.error(file, f"max_batch_size {config.max_batch_size} exceeds step {name!r}'s max_batch_size "
                         f"{step_config.max_batch_size}; lower the ensemble's or raise the step's (a step with "
                         "max_batch_size 0 is fine)")
        step_batching = step_config.max_batch_size > 0
        inputs = {t.name: t for t in step_config.input}
        for key in step.input_map:
            if key not in inputs:
                report.error(file, f"step {name!r}: input_map key {key!r} is not an input of that model (its inputs: "
                             f"{', '.join(sorted(inputs)) or 'none'})")
        for spec in step_config.input:
            if spec.name not in step.input_map:
                if not spec.optional:
                    report.error(file, f"step {name!r}: required input {spec.name!r} is not in its input_map")
                continue
            _agree(tensors, step.input_map[spec.name], _node(spec.data_type, spec.dims, step_batching,
                   f"step {name!r} input {spec.name!r}"), report, file)
        outputs = {t.name: t for t in step_config.output}
        for key, tensor in step.output_map.items():
            spec = outputs.get(key)
            if spec is None:
                report.error(file, f"step {name!r}: output_map key {key!r} is not an output of that model (its "
                             f"outputs: {', '.join(sorted(outputs)) or 'none'})")
                continue
            _agree(tensors, tensor, _node(spec.data_type, spec.dims, step_batching,
                   f"output {key!r} of step {name!r}"), report, file)
    if _count(report) == before:
        _decoupled_origins(config, steps, report, file)


@dataclass(eq=False)
class _Flow:
    """A tensor (or, for the outputs of one step together, its symbolic sibling) in Triton's walk of which decoupled
    step each tensor's responses come from (ensemble_utils.cc ValidateEnsembleConfig)."""

    model: str
    writer: str = ""  # the step whose output it is
    decoupled: bool = False
    label: int = 0
    visited: bool = False
    prev: list[_Flow] = field(default_factory=list)
    next: list[_Flow] = field(default_factory=list)
    sibling: _Flow | None = None


def _decoupled_origins(config: Any, steps: list[tuple[Any, ModelFolder]], report: Report, file: str) -> None:
    """A step (or the ensemble's outputs) fed by tensors that come from different decoupled steps: Triton refuses
    it, the responses of each decoupled step being a stream of their own."""
    nodes: dict[str, _Flow] = {t.name: _Flow(config.name) for t in (*config.input, *config.output)}
    sink = _Flow(config.name)
    for t in config.output:
        sink.prev.append(nodes[t.name])
        nodes[t.name].next.append(sink)
    for step, model in steps:
        for tensor in [*step.input_map.values(), *step.output_map.values()]:
            nodes.setdefault(tensor, _Flow(model.folder))
        sibling = _Flow(model.folder)
        for tensor in step.output_map.values():
            node = nodes[tensor]
            node.sibling, node.decoupled = sibling, model.config.model_transaction_policy.decoupled
            node.writer = model.folder
            for source in step.input_map.values():
                node.prev.append(nodes[source])
                nodes[source].next.append(node)
    queue = [nodes[t.name] for t in config.input if t.name in nodes]
    for node in queue:
        node.visited = True
    labels = 0
    while queue:
        current = queue.pop(0)
        for node in current.next:
            if node.visited or not all(p.visited for p in node.prev):
                continue
            if len({p.label for p in node.prev}) > 1:
                who = f"step {node.writer!r}" if node.writer else f"ensemble {node.model!r}'s output"
                report.error(file, f"{who} receives inputs that come from different decoupled models (each decoupled "
                             "step answers with a stream of its own), which Triton refuses: feed it from one decoupled "
                             "branch")
                return
            label = node.prev[0].label
            if node.sibling is not None and node.sibling.visited:
                node.label = node.sibling.label
            else:
                if node.decoupled:
                    labels += 1
                node.label = labels if node.decoupled else label
                if node.sibling is not None:
                    node.sibling.label, node.sibling.visited = node.label, True
            node.visited = True
            queue.append(node)


def _agree(tensors: dict[str, _Tensor], name: str, new: _Tensor, report: Report, file: str) -> None:
    """Triton's ValidateTensorConsistency: same data type, and dims alike (-1 matches any size) either without or
    with the batch dimension, against the first model that named the tensor."""
    seen = tensors.setdefault(name, new)
    if seen is new:
        return
    if seen.dtype != new.dtype:
        report.error(file, f"{new.source} is {_dtype(new.dtype)} but {seen.source} is {_dtype(seen.dtype)} (tensor "
                     f"{name!r}); make the data types equal")
    elif not (_alike(seen.dims, new.dims) or _alike(seen.full, new.full)):
        report.error(file, f"{new.source} has shape {new.full} but {seen.source} has shape {seen.full} (batch "
                     f"included; -1 matches any size; tensor {name!r}); make them agree")


def _alike(a: Sequence[int], b: Sequence[int]) -> bool:
    return len(a) == len(b) and all(x == y or x == -1 or y == -1 for x, y in zip(a, b, strict=True))


def _dtype(value: int) -> str:
    from conch.compiler.pbtxt import model_config_proto

    return str(model_config_proto().DataType.Name(value))
