"""One small repository per Triton load rule, each breaking only that rule (or keeping to it, where conch once
refused what Triton loads), with Triton 2.51's own verdict and words as the real tritonserver gave them
(tests/archive/test_load_rules_triton.py confirms them again). Python-backend models stand in where the rule does
not depend on the backend. Every model name carries its case's prefix, so all cases load in one server."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

# A Python model Triton loads: the backend needs only execute().
MODEL_PY = "class TritonPythonModel:\n    def execute(self, requests):\n        return []\n"


def tensor(name: str, dims: str = "4", dtype: str = "TYPE_FP32", extra: str = "") -> str:
    return f'{{ name: "{name}" data_type: {dtype} dims: [ {dims} ] {extra}}}'


def model(name: str, inputs: list[str], outputs: list[str], mbs: int = 0, extra: str = "",
          head: str = 'backend: "python"') -> str:
    return (f'name: "{name}"\n{head}\nmax_batch_size: {mbs}\ninput [ {", ".join(inputs)} ]\n'
            f'output [ {", ".join(outputs)} ]\n{extra}\n')


def step(model_name: str, inputs: dict[str, str], outputs: dict[str, str], extra: str = "model_version: -1 ") -> str:
    maps = "".join(f'input_map {{ key: "{k}" value: "{v}" }} ' for k, v in inputs.items())
    maps += "".join(f'output_map {{ key: "{k}" value: "{v}" }} ' for k, v in outputs.items())
    return f'{{ model_name: "{model_name}" {extra}{maps}}}'


def ensemble(name: str, inputs: list[str], outputs: list[str], steps: list[str], mbs: int = 0,
             extra: str = "", head: str = 'platform: "ensemble"', scheduling: str = "") -> str:
    return (f'name: "{name}"\n{head}\nmax_batch_size: {mbs}\ninput [ {", ".join(inputs)} ]\n'
            f'output [ {", ".join(outputs)} ]\n{extra}\n'
            f'ensemble_scheduling {{ {scheduling}step [ {", ".join(steps)} ] }}\n')


@dataclass(frozen=True)
class Case:
    """A repository (path -> text; None: an empty folder), the model Triton is asked to load, Triton 2.51's
    words when it refuses it ("" when it loads), and the words of conch's findings (the first is the cause
    Triton reports, the others every other cause)."""

    id: str
    rule: str
    files: dict[str, str | None]
    served: str
    triton: str = ""
    conch: tuple[str, ...] = ()

    @property
    def loads(self) -> bool:
        return not self.triton

    def write(self, root: Path) -> Path:
        repo = root / self.id
        for path, text in self.files.items():
            target = repo / path
            if text is None:
                target.mkdir(parents=True, exist_ok=True)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text)
        return repo


def python_model(folder: str, config: str, versions: tuple[int, ...] = (1,)) -> dict[str, str | None]:
    files: dict[str, str | None] = {f"{folder}/config.pbtxt": config}
    files.update({f"{folder}/{v}/model.py": MODEL_PY for v in versions})
    return files


@dataclass
class Base:
    """The simplest working repository: ensemble INPUT0 -> add (IN -> OUT) -> OUTPUT0; each case changes one
    thing of it."""

    p: str
    ens_mbs: int = 0
    ens_extra: str = ""
    ens_head: str = 'platform: "ensemble"'
    ens_inputs: list[str] = field(default_factory=lambda: [tensor("INPUT0")])
    ens_outputs: list[str] = field(default_factory=lambda: [tensor("OUTPUT0")])
    steps: list[str] | None = None
    step_config: str | None = None
    step_versions: tuple[int, ...] = (1,)
    ens_versions: bool = True
    scheduling: str = ""
    more: dict[str, str | None] = field(default_factory=dict)

    @property
    def add(self) -> str:
        return f"{self.p}add"

    @property
    def ens(self) -> str:
        return f"{self.p}ens"

    def files(self) -> dict[str, str | None]:
        steps = self.steps if self.steps is not None else [step(self.add, {"IN": "INPUT0"}, {"OUT": "OUTPUT0"})]
        files: dict[str, str | None] = {
            f"{self.ens}/config.pbtxt": ensemble(self.ens, self.ens_inputs, self.ens_outputs, steps, self.ens_mbs,
                                                 self.ens_extra, self.ens_head, self.scheduling)}
        if self.ens_versions:
            files[f"{self.ens}/1"] = None
        config = self.step_config if self.step_config is not None else model(self.add, [tensor("IN")],
                                                                                [tensor("OUT")])
        files.update(python_model(self.add, config, self.step_versions))
        files.update(self.more)
        return files


def _with(p: str, **changes: object) -> Base:
    return Base(p, **changes)  # type: ignore[arg-type]


def _add_step(p: str, **kw: object) -> str:
    return step(f"{p}add", {"IN": "INPUT0"}, {"OUT": "OUTPUT0"}, **kw)  # type: ignore[arg-type]


def _two_steps(p: str, second_in: str = "MID", first_out: str = "MID", out: str = "OUTPUT0") -> list[str]:
    return [step(f"{p}add", {"IN": "INPUT0"}, {"OUT": first_out}), step(f"{p}add2", {"IN": second_in}, {"OUT": out})]


_DECOUPLED = "model_transaction_policy { decoupled: true }"


def _batching(p: str, extra: str) -> Base:
    """The step, batching up to 4 inside an ensemble batching up to 4, with ``extra`` in its config."""
    return _with(p, ens_mbs=4, step_config=model(f"{p}add", [tensor("IN")], [tensor("OUT")], mbs=4, extra=extra))


def _step_io(p: str, first_input: str) -> Base:
    """The step with ``first_input`` as its only input (mapped as IN)."""
    return _with(p, step_config=model(f"{p}add", [first_input], [tensor("OUT")]))


def _add2(p: str, config: str | None = None) -> dict[str, str | None]:
    return python_model(f"{p}add2", config or model(f"{p}add2", [tensor("IN")], [tensor("OUT")]))


# A Python step's config without inputs or outputs: its model.py's auto_complete_config gives them.
_BARE = 'name: "{p}add"\nbackend: "python"\nmax_batch_size: 0\n'


def _completing(dims: str) -> str:
    """A model.py whose auto_complete_config adds input IN and output OUT (TYPE_FP32, ``dims``)."""
    return ("class TritonPythonModel:\n    @staticmethod\n    def auto_complete_config(config):\n"
            f'        config.add_input({{"name": "IN", "data_type": "TYPE_FP32", "dims": {dims}}})\n'
            f'        config.add_output({{"name": "OUT", "data_type": "TYPE_FP32", "dims": {dims}}})\n'
            "        return config\n\n    def execute(self, requests):\n        return []\n")


_RAISING = ("class TritonPythonModel:\n    @staticmethod\n    def auto_complete_config(config):\n"
            "        raise ValueError('no tokenizer here')\n\n    def execute(self, requests):\n        return []\n")


LOADS, REFUSED = False, True
# (id, rule, repository for a prefix, whether Triton 2.51 refuses it (its words: TRITON_2_51), conch's words: the
# cause Triton reports first, then every other cause)
CASES: list[tuple[str, str, object, bool, tuple[str, ...]]] = [
    ("base_loads", "-", lambda p: _with(p), LOADS, ()),
    # -- autofill and ValidateModelConfig
    ("autofill_python_from_model_py", "autofill", lambda p: _with(
        p, step_config=model(f"{p}add", [tensor("IN")], [tensor("OUT")], head="")), LOADS, ()),
    ("no_backend_no_model_file", "autofill", lambda p: _with(
        p, step_config=model(f"{p}add", [tensor("IN")], [tensor("OUT")], head=""), step_versions=(),
        more={f"{p}add/1/weights.bin": "x"}), REFUSED, ("so Triton cannot tell which backend runs it",)),
    ("platform_without_backend", "platform", lambda p: _with(
        p, step_config=model(f"{p}add", [tensor("IN")], [tensor("OUT")], head='platform: "python"')), REFUSED,
     ("platform 'python' is not one Triton runs by itself",)),
    ("backend_on_ensemble", "ensemble-backend", lambda p: _with(
        p, ens_head='platform: "ensemble"\nbackend: "python"'), REFUSED, ("sets backend 'python' on an ensemble",)),
    ("platform_backend_pair", "platform-backend-pair", lambda p: _with(
        p, step_config=model(f"{p}add", [tensor("IN")], [tensor("OUT")],
                             head='platform: "pytorch_libtorch"\nbackend: "onnxruntime"')), REFUSED,
     ("pairs platform 'pytorch_libtorch' with backend 'onnxruntime'",)),
    ("negative_max_batch_size", "max-batch-size", lambda p: _with(
        p, step_config=model(f"{p}add", [tensor("IN")], [tensor("OUT")], mbs=-1)), REFUSED,
     ("max_batch_size -1 is negative",)),
    ("preferred_batch_size_too_big", "dynamic-batching", lambda p: _with(
        p, step_config=model(f"{p}add", [tensor("IN")], [tensor("OUT")], mbs=4,
                             extra="dynamic_batching { preferred_batch_size: [ 8 ] }"), ens_mbs=4), REFUSED,
     ("dynamic_batching preferred_batch_size 8 must be between 1 and max_batch_size 4",)),
    ("scheduling_on_non_ensemble", "ensemble-scheduling", lambda p: _with(
        p, step_config=model(f"{p}add", [tensor("IN")], [tensor("OUT")], extra="ensemble_scheduling { step [ "
                             + step(f"{p}add2", {"IN": "IN"}, {"OUT": "OUT"}) + " ] }"), more=_add2(p)), REFUSED,
     ("sets ensemble_scheduling on platform ''",)),
    ("ensemble_without_scheduling", "ensemble-scheduling", lambda p: _with(
        p, steps=[], ens_extra=""), REFUSED, ("has no ensemble_scheduling steps",)),
    ("instance_group_on_ensemble", "ensemble-fields", lambda p: _with(
        p, ens_extra="instance_group [ { kind: KIND_CPU } ]"), REFUSED,
     ("sets instance_group, which Triton refuses on an ensemble",)),
    ("optimization_on_ensemble", "ensemble-fields", lambda p: _with(
        p, ens_extra="optimization { input_pinned_memory { enable: false } }"), REFUSED,
     ("sets optimization, which Triton refuses on an ensemble",)),
    ("warmup_on_ensemble", "ensemble-fields", lambda p: _with(
        p, ens_extra='model_warmup [ { name: "w" batch_size: 1 inputs { key: "INPUT0" value: { data_type: TYPE_FP32 '
        'dims: [ 4 ] zero_data: true } } } ]'), REFUSED, ("sets model_warmup, which Triton refuses on an ensemble",)),
    ("dynamic_batching_on_ensemble", "ensemble-fields", lambda p: _with(
        p, ens_mbs=4, ens_extra="dynamic_batching { }",
        step_config=model(f"{p}add", [tensor("IN")], [tensor("OUT")], mbs=4)), REFUSED,
     ('another member of oneof "scheduling_choice"',)),
    ("step_without_model_name", "ensemble-graph", lambda p: _with(
        p, steps=[step("", {"IN": "INPUT0"}, {"OUT": "OUTPUT0"})]), REFUSED,
     ("step 0 (no model_name) has no model_name; Triton needs every step to name its model",)),
    ("step_without_input_map", "ensemble-graph", lambda p: _with(
        p, steps=[step(f"{p}add", {}, {"OUT": "OUTPUT0"})]), REFUSED, ("step 0 (PREFadd) has no input_map; "
      "Triton needs every step to name its model",)),
    ("step_without_output_map", "ensemble-graph", lambda p: _with(
        p, steps=[step(f"{p}add", {"IN": "INPUT0"}, {})]), REFUSED, ("step 0 (PREFadd) has no output_map; "
      "Triton needs every step to name its model",)),
    ("tensor_written_twice", "ensemble-graph", lambda p: _with(
        p, steps=[_add_step(p), step(f"{p}add2", {"IN": "INPUT0"}, {"OUT": "OUTPUT0"})], more=_add2(p)), REFUSED,
     ("tensor 'OUTPUT0' is written by both step 0 and step 1",)),
    ("tensor_written_twice_by_one_step", "ensemble-graph", lambda p: _with(
        p, steps=[step(f"{p}add", {"IN": "INPUT0"}, {"OUT": "OUTPUT0", "OUT2": "OUTPUT0"})],
        step_config=model(f"{p}add", [tensor("IN")], [tensor("OUT"), tensor("OUT2")])), REFUSED,
     ("tensor 'OUTPUT0' is written twice by step 0",)),
    ("ensemble_input_unused", "ensemble-flow", lambda p: _with(
        p, ens_inputs=[tensor("INPUT0"), tensor("INPUT1")]), REFUSED, ("ensemble input 'INPUT1' is read by no step",)),
    ("ensemble_output_not_written", "ensemble-flow", lambda p: _with(
        p, ens_outputs=[tensor("OUTPUT0"), tensor("OUTPUT1")]), REFUSED,
     ("ensemble output 'OUTPUT1' is written by no step's output_map",)),
    ("output_depends_on_unwritten", "ensemble-flow", lambda p: _with(
        p, steps=_two_steps(p, second_in="NOWHERE"), more=_add2(p)), REFUSED,
     ("ensemble output 'OUTPUT0' is not written",
      "tensor 'NOWHERE' is read by step(s) 1 but is neither an ensemble input nor written by any step; write it or "
      "read another",
      "tensor 'MID' written by step 0 is read by no step")),
    ("intermediate_unread", "ensemble-flow", lambda p: _with(
        p, steps=[step(f"{p}add", {"IN": "INPUT0"}, {"OUT": "OUTPUT0"}),
                  step(f"{p}add2", {"IN": "INPUT0"}, {"OUT": "SPARE"})], more=_add2(p)), REFUSED,
     ("tensor 'SPARE' written by step 1 is read by no step",)),
    ("step_writes_ensemble_input", "ensemble-flow", lambda p: _with(
        p, steps=[_add_step(p), step(f"{p}add2", {"IN": "OUTPUT0"}, {"OUT": "INPUT0"})], more=_add2(p)), LOADS, ()),
    # -- tensors (ValidateModelIOConfig)
    ("input_without_dims", "io", lambda p: _with(
        p, step_config=model(f"{p}add", ['{ name: "IN" data_type: TYPE_FP32 }'], [tensor("OUT")])), REFUSED,
     ("input 'IN' has no dims",)),
    ("zero_dim", "io", lambda p: _with(
        p, step_config=model(f"{p}add", [tensor("IN", "0")], [tensor("OUT")])), REFUSED,
     ("input 'IN' dims [0]: each dimension is >= 1 or -1",)),
    ("reshape_size_differs", "io", lambda p: _with(
        p, step_config=model(f"{p}add", [tensor("IN", extra="reshape: { shape: [ 2, 3 ] } ")], [tensor("OUT")])),
     REFUSED, ("dims [4] and reshape [2, 3] hold different numbers of elements",)),
    ("cpu_group_with_gpus", "instance-group", lambda p: _with(
        p, step_config=model(f"{p}add", [tensor("IN")], [tensor("OUT")],
                             extra="instance_group [ { kind: KIND_CPU gpus: [ 0 ] } ]")), REFUSED,
     ("is KIND_CPU/KIND_MODEL but lists gpus",)),
    ("name_differs_from_folder", "folder-name", lambda p: _with(
        p, step_config=model(f"{p}other", [tensor("IN")], [tensor("OUT")])), REFUSED,
     ("names model 'PREFother', but its folder is 'PREFadd'",)),
    ("field_newer_than_release", "fields-by-release", lambda p: _with(p, scheduling="max_inflight_requests: 4 "),
     REFUSED, ("sets max_inflight_requests (ModelEnsembling.max_inflight_requests), which Triton 24.10 does not "
               "know",)),
    # -- more of ValidateModelConfig, ValidateModelIOConfig and ValidateInstanceGroup, one field each
    ("ensemble_platform_without_scheduling", "ensemble-scheduling", lambda p: _with(p, more={
        f"{p}ens/config.pbtxt": f'name: "{p}ens"\nplatform: "ensemble"\nmax_batch_size: 0\ninput [ {tensor("INPUT0")} ]'
        f'\noutput [ {tensor("OUTPUT0")} ]\n'}), REFUSED, ("is an ensemble without ensemble_scheduling",)),
    ("default_priority_level_out_of_range", "dynamic-batching", lambda p: _batching(
        p, "dynamic_batching { priority_levels: 2 default_priority_level: 3 }"), REFUSED,
     ("dynamic_batching default_priority_level 3 must be in [1, 2]",)),
    ("priority_queue_policy_level_out_of_range", "dynamic-batching", lambda p: _batching(
        p, "dynamic_batching { priority_levels: 2 default_priority_level: 1 priority_queue_policy { key: 5 value: { "
        "max_queue_size: 1 } } }"), REFUSED, ("dynamic_batching priority_queue_policy names a level outside [1, 2]",)),
    ("preserve_ordering_with_priorities", "dynamic-batching", lambda p: _batching(
        p, "dynamic_batching { preserve_ordering: true priority_levels: 2 default_priority_level: 1 }"), REFUSED,
     ("dynamic_batching preserve_ordering allows one priority level only",)),
    ("preserve_ordering_with_delay", "dynamic-batching", lambda p: _batching(
        p, "dynamic_batching { preserve_ordering: true default_queue_policy { timeout_action: DELAY "
        "default_timeout_microseconds: 100 } }"), REFUSED,
     ("dynamic_batching preserve_ordering cannot have a DELAY timeout_action",)),
    ("sequence_batching_with_response_cache", "sequence-batching", lambda p: _batching(
        p, "sequence_batching { }\nresponse_cache { enable: true }"), REFUSED,
     ("enables response_cache with sequence_batching",)),
    ("sequence_preferred_batch_size_too_big", "sequence-batching", lambda p: _batching(
        p, "sequence_batching { oldest { max_candidate_sequences: 4 preferred_batch_size: [ 8 ] } }"), REFUSED,
     ("sequence_batching preferred_batch_size 8 must be between 1 and max_batch_size 4",)),
    ("sequence_slot_utilization_out_of_range", "sequence-batching", lambda p: _batching(
        p, "sequence_batching { direct { minimum_slot_utilization: 1.5 } }"), REFUSED,
     ("sequence_batching minimum_slot_utilization must be in (0.0, 1.0]",)),
    ("decoupled_with_response_cache", "response-cache", lambda p: _batching(
        p, "model_transaction_policy { decoupled: true }\nresponse_cache { enable: true }"), REFUSED,
     ("enables response_cache on a decoupled model",)),
    ("tensor_without_name", "io", lambda p: _step_io(p, '{ data_type: TYPE_FP32 dims: [ 4 ] }'), REFUSED,
     ("an input has no name",)),
    ("tensor_without_data_type", "io", lambda p: _step_io(p, '{ name: "IN" dims: [ 4 ] }'), REFUSED,
     ("input 'IN' has no data_type",)),
    ("empty_reshape_without_batching", "io", lambda p: _step_io(
        p, tensor("IN", "1", extra="reshape: { shape: [ ] } ")), REFUSED,
     ("input 'IN' has an empty reshape in a non-batching model",)),
    ("zero_in_reshape", "io", lambda p: _step_io(p, tensor("IN", extra="reshape: { shape: [ 0, 4 ] } ")), REFUSED,
     ("input 'IN' reshape [0, 4]: each dimension is >= 1 or -1",)),
    ("nchw_without_3_dims", "io", lambda p: _step_io(p, tensor("IN", extra="format: FORMAT_NCHW ")), REFUSED,
     ("input 'IN' has format NHWC/NCHW, which needs 3 dims, not 1",)),
    ("shape_tensor_off_tensorrt", "io", lambda p: _step_io(p, tensor("IN", extra="is_shape_tensor: true ")), REFUSED,
     ("input 'IN' is a shape tensor, which only TensorRT models have",)),
    ("non_linear_io_off_tensorrt", "io", lambda p: _step_io(p, tensor("IN", extra="is_non_linear_format_io: true ")),
     REFUSED, ("input 'IN' is non-linear format IO, which only TensorRT models have",)),
    ("batch_input_two_sources", "batch-io", lambda p: _batching(
        p, 'batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "N" data_type: TYPE_INT32 source_input: [ "IN", '
        '"IN" ] } ]'), REFUSED, ("batch_input 'N' needs exactly 1 source_input",)),
    ("batch_input_wrong_type", "batch-io", lambda p: _batching(
        p, 'batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "N" data_type: TYPE_INT64 source_input: "IN" } ]'),
     REFUSED, ("batch_input 'N' data_type must be TYPE_INT32 or TYPE_FP32",)),
    ("batch_input_unknown_source", "batch-io", lambda p: _batching(
        p, 'batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "N" data_type: TYPE_INT32 source_input: "NO" } ]'),
     REFUSED, ("batch_input source_input 'NO' is not an input of the model",)),
    ("batch_output_unknown_source", "batch-io", lambda p: _batching(
        p, 'batch_output [ { kind: BATCH_SCATTER_WITH_INPUT_SHAPE target_name: "OUT" source_input: "NO" } ]'),
     REFUSED, ("batch_output source_input 'NO' is not an input of the model",)),
    ("batch_output_unknown_target", "batch-io", lambda p: _batching(
        p, 'batch_output [ { kind: BATCH_SCATTER_WITH_INPUT_SHAPE target_name: "NO" source_input: "IN" } ]'),
     REFUSED, ("batch_output target_name 'NO' is not an output of the model",)),
    ("profile_off_tensorrt", "instance-group", lambda p: _batching(
        p, 'instance_group [ { kind: KIND_CPU profile: [ "0" ] } ]'), REFUSED,
     ("sets profile, which only TensorRT models have",)),
    ("ensembles_in_a_circle", "steps-present", lambda p: _with(p, more={
        f"{p}inner/config.pbtxt": ensemble(f"{p}inner", [tensor("IN")], [tensor("OUT")],
                                           [step(f"{p}ens", {"INPUT0": "IN"}, {"OUTPUT0": "OUT"})]),
        f"{p}inner/1": None}, steps=[step(f"{p}inner", {"IN": "INPUT0"}, {"OUT": "OUTPUT0"})]), REFUSED,
     ("2 ensembles (PREFens, PREFinner): SageMaker serves one per archive",)),
    ("decoupled_branches_joined", "decoupled-origins", lambda p: _with(p, steps=[
        step(f"{p}add", {"IN": "INPUT0"}, {"OUT": "LEFT"}), step(f"{p}add2", {"IN": "INPUT0"}, {"OUT": "RIGHT"}),
        step(f"{p}join", {"A": "LEFT", "B": "RIGHT"}, {"OUT": "OUTPUT0"})],
        step_config=model(f"{p}add", [tensor("IN")], [tensor("OUT")], extra=_DECOUPLED),
        more={**_add2(p, model(f"{p}add2", [tensor("IN")], [tensor("OUT")], extra=_DECOUPLED)),
              **python_model(f"{p}join", model(f"{p}join", [tensor("A"), tensor("B")], [tensor("OUT")]))}), REFUSED,
     ("step 'PREFjoin' receives inputs that come from different decoupled models",)),
    ("force_cpu_only_not_yes_or_no", "python-backend", lambda p: _with(
        p, step_config=model(f"{p}add", [tensor("IN")], [tensor("OUT")], extra='parameters { key: '
                             '"FORCE_CPU_ONLY_INPUT_TENSORS" value: { string_value: "true" } }')), REFUSED,
     ("parameter FORCE_CPU_ONLY_INPUT_TENSORS is 'true'; the Python backend takes \"yes\" or \"no\" only",)),
    ("step_is_the_ensemble", "steps-present", lambda p: _with(
        p, steps=[step(f"{p}ens", {"IN": "INPUT0"}, {"OUT": "OUTPUT0"})]), REFUSED,
     ("step model 'PREFens' is the ensemble itself",)),
    # -- the repository: steps present, versions
    ("step_model_missing", "steps-present", lambda p: _with(
        p, steps=[step(f"{p}gone", {"IN": "INPUT0"}, {"OUT": "OUTPUT0"})]), REFUSED,
     ("step model(s) PREFgone have no folder",)),
    ("own_error_and_missing_step", "steps-present", lambda p: _with(
        p, steps=[step(f"{p}gone", {"IN": "INPUT0"}, {"OUT": "OUTPUT0"})],
        ens_extra="optimization { input_pinned_memory { enable: false } }"), REFUSED,
     ("sets optimization, which Triton refuses on an ensemble", "step model(s) PREFgone have no folder")),
    ("step_without_version_folder", "versions", lambda p: _with(p, step_versions=()), REFUSED,
     ("PREFadd/: error: has no version folder Triton loads",)),
    ("ensemble_without_version_folder", "versions", lambda p: _with(p, ens_versions=False), REFUSED,
     ("PREFens/: error: has no version folder Triton loads",)),
    ("policy_names_a_missing_version", "versions", lambda p: _with(
        p, step_config=model(f"{p}add", [tensor("IN")], [tensor("OUT")],
                             extra="version_policy: { specific: { versions: [ 1, 2 ] } }")), LOADS, ()),
    ("step_without_model_version", "step-version", lambda p: _with(p, steps=[_add_step(p, extra="")]), REFUSED,
     ("asks for model_version 0",)),
    ("step_asks_missing_version", "step-version", lambda p: _with(
        p, steps=[_add_step(p, extra="model_version: 2 ")]), REFUSED, ("asks for model_version 2",)),
    ("policy_leaves_asked_version_out", "step-version", lambda p: _with(
        p, steps=[_add_step(p, extra="model_version: 2 ")], step_versions=(1, 2),
        step_config=model(f"{p}add", [tensor("IN")], [tensor("OUT")],
                          extra="version_policy: { specific: { versions: [ 1 ] } }")), REFUSED,
     ("asks for model_version 2",)),
    ("latest_leaves_asked_version_out", "step-version", lambda p: _with(
        p, steps=[_add_step(p, extra="model_version: 1 ")], step_versions=(1, 2)), REFUSED,
     ("asks for model_version 1",)),
    # -- the ensemble against its steps (ValidateEnsembleConfig)
    ("ensemble_batch_exceeds_step", "ensemble-batch", lambda p: _with(
        p, ens_mbs=8, step_config=model(f"{p}add", [tensor("IN")], [tensor("OUT")], mbs=4)), REFUSED,
     ("max_batch_size 8 exceeds step 'PREFadd''s max_batch_size 4",)),
    ("non_batching_step_in_batching_ensemble", "ensemble-batch", lambda p: _with(
        p, ens_mbs=2, ens_inputs=[tensor("INPUT0", "16")], ens_outputs=[tensor("OUTPUT0", "16")],
        step_config=model(f"{p}add", [tensor("IN", "-1, 16")], [tensor("OUT", "-1, 16")])), LOADS, ()),
    ("batching_step_in_non_batching_ensemble", "tensor-consistency", lambda p: _with(
        p, step_config=model(f"{p}add", [tensor("IN")], [tensor("OUT")], mbs=8)), LOADS, ()),
    ("input_map_key_unknown", "tensor-mapping", lambda p: _with(
        p, steps=[step(f"{p}add", {"IN": "INPUT0", "EXTRA": "INPUT0"}, {"OUT": "OUTPUT0"})]), REFUSED,
     ("input_map key 'EXTRA' is not an input of that model",)),
    ("required_input_unmapped", "tensor-mapping", lambda p: _with(
        p, step_config=model(f"{p}add", [tensor("IN"), tensor("IN2")], [tensor("OUT")])), REFUSED,
     ("required input 'IN2' is not in its input_map",)),
    ("optional_input_unmapped", "tensor-mapping", lambda p: _with(
        p, step_config=model(f"{p}add", [tensor("IN"), tensor("IN2", extra="optional: true ")], [tensor("OUT")])),
     LOADS, ()),
    ("output_map_key_unknown", "tensor-mapping", lambda p: _with(
        p, steps=[step(f"{p}add", {"IN": "INPUT0"}, {"OUT": "OUTPUT0", "NOPE": "OUTPUT1"})],
        ens_outputs=[tensor("OUTPUT0"), tensor("OUTPUT1")]), REFUSED,
     ("output_map key 'NOPE' is not an output of that model",)),
    ("dtype_mismatch", "tensor-consistency", lambda p: _with(
        p, step_config=model(f"{p}add", [tensor("IN", dtype="TYPE_INT32")], [tensor("OUT")])), REFUSED,
     ("step 'PREFadd' input 'IN' is TYPE_INT32 but ensemble input 'INPUT0' is TYPE_FP32 (tensor 'INPUT0'); make the "
      "data types equal",)),
    ("shape_mismatch", "tensor-consistency", lambda p: _with(
        p, step_config=model(f"{p}add", [tensor("IN", "5")], [tensor("OUT")])), REFUSED,
     ("step 'PREFadd' input 'IN' has shape [5] but ensemble input 'INPUT0' has shape [4] (batch included; -1 matches "
      "any size; tensor 'INPUT0'); make them agree",)),
    # -- a Python model's auto_complete_config, which Triton runs with SageMaker's flags even when config.pbtxt is
    # there (python_backend ModelState: the stub completes the config before the model loads; issue 39)
    ("io_by_auto_complete", "auto-complete", lambda p: _with(
        p, step_config=_BARE.format(p=p), more={f"{p}add/1/model.py": _completing("[ 4 ]")}), LOADS, ()),
    ("auto_complete_gives_other_shape", "auto-complete", lambda p: _with(
        p, step_config=_BARE.format(p=p), more={f"{p}add/1/model.py": _completing("[ 5 ]")}), REFUSED,
     ("step 'PREFadd' input 'IN' has shape [5] but ensemble input 'INPUT0' has shape [4]",)),
    ("auto_complete_config_raises", "auto-complete", lambda p: _with(
        p, more={f"{p}add/1/model.py": _RAISING}), REFUSED,
     ("auto_complete_config fails", "no tokenizer here")),
]


def cases() -> list[Case]:
    """Every case, each with its own prefix (c00_, c01_, ...) on every model name."""
    out = []
    for i, (id, rule, make, refused, conch) in enumerate(CASES):
        p = f"c{i:02d}_"
        base = make(p)  # type: ignore[operator]
        triton = TRITON_2_51.get(id, "(not recorded)") if refused else ""
        out.append(Case(id, rule, base.files(), base.ens, triton.replace("PREF", p),
                        tuple(c.replace("PREF", p) for c in conch)))
    return out


# Triton 2.51's words for each refused case (its load answer, then the poll failures it logged), as the real
# tritonserver gave them with SageMaker's flags (auto-complete on: server docker/sagemaker/serve does not pass
# --disable-auto-complete-config); PREF stands for the case's prefix and ROOT for the folder holding the
# repositories.
# AT_LOAD: a step's own config refused by ValidateModelIOConfig and the checks after it. With auto-complete off,
# Triton refused it at poll ("contains models that are not available or ambiguous: PREFadd\nPREFadd: <words>");
# with it on, the config is completed first (by the backend) and the same rule refuses it at the step's load, in
# the same words: the verdict and its cause are unchanged (issue 39).
AT_LOAD = ("load failed for model 'PREFens': ensemble 'PREFens' depends on 'PREFadd' which has no loaded version. "
           "Model 'PREFadd' loading failed with error: version 1 is at UNAVAILABLE state: Invalid argument: {};")
TRITON_2_51 = {
    "no_backend_no_model_file": (
        "load failed for model 'PREFens': ensemble PREFens contains models that are not available or "
        "ambiguous: PREFadd\nPREFadd: Invalid model name: Could not determine backend for model 'PREFadd' "
        "with no backend in model configuration. Expected model name of the form 'model.<backend_name>'."),
    "platform_without_backend": (
        "load failed for model 'PREFens': ensemble PREFens contains models that are not available or "
        "ambiguous: PREFadd\nPREFadd: unexpected platform type 'python' for PREFadd"),
    "backend_on_ensemble": (
        "failed to load 'PREFens', failed to poll from model repository\nPREFens: Ensemble model 'PREFens' "
        "must have platform type 'ensemble' and empty backend type"),
    "platform_backend_pair": (
        "load failed for model 'PREFens': ensemble PREFens contains models that are not available or "
        "ambiguous: PREFadd\nPREFadd: unexpected 'platform' and 'backend' pair, got:pytorch_libtorch, "
        "onnxruntime"),
    "negative_max_batch_size": (
        "load failed for model 'PREFens': ensemble PREFens contains models that are not available or "
        "ambiguous: PREFadd\nPREFadd: 'max_batch_size' must be non-negative value for PREFadd"),
    "preferred_batch_size_too_big": (
        "load failed for model 'PREFens': ensemble PREFens contains models that are not available or "
        "ambiguous: PREFadd\nPREFadd: dynamic batching preferred size must be <= max batch size for PREFadd"),
    "scheduling_on_non_ensemble": (
        "load failed for model 'PREFens': ensemble PREFens contains models that are not available or ambiguous: "
        "PREFadd\nPREFadd: ensemble scheduling cannot be set for model 'PREFadd' whose platform is not ensemble"),
    "ensemble_without_scheduling": (
        "failed to load 'PREFens', failed to poll from model repository\nPREFens: must specify 'step' for "
        "ensemble 'PREFens'"),
    "instance_group_on_ensemble": (
        "failed to load 'PREFens', failed to poll from model repository\nPREFens: instance group should not "
        "be specified for ensemble 'PREFens'"),
    "optimization_on_ensemble": (
        "failed to load 'PREFens', failed to poll from model repository\nPREFens: optimization should not be "
        "specified for ensemble 'PREFens'"),
    "warmup_on_ensemble": (
        "failed to load 'PREFens', failed to poll from model repository\nPREFens: model_warmup can not be "
        "specified for ensemble 'PREFens'"),
    "dynamic_batching_on_ensemble": (
        "failed to load 'PREFens', failed to poll from model repository\nPREFens: failed to read text proto "
        "from ROOT/dynamic_batching_on_ensemble/PREFens/config.pbtxt"),
    "step_without_model_name": (
        "failed to load 'PREFens', failed to poll from model repository\nPREFens: must specify 'model_name' "
        "in step 0 of ensemble 'PREFens'"),
    "step_without_input_map": (
        "failed to load 'PREFens', failed to poll from model repository\nPREFens: must specify 'input_map' in "
        "step 0 of ensemble 'PREFens'"),
    "step_without_output_map": (
        "failed to load 'PREFens', failed to poll from model repository\nPREFens: must specify 'output_map' "
        "in step 0 of ensemble 'PREFens'"),
    "tensor_written_twice": (
        "failed to load 'PREFens', failed to poll from model repository\nPREFens: ensemble tensor 'OUTPUT0' "
        "can appear in an output map only once for ensemble 'PREFens' step 1"),
    "ensemble_input_unused": (
        "failed to load 'PREFens', failed to poll from model repository\nPREFens: ensemble input 'INPUT1' for "
        "ensemble PREFens' is not used"),
    "ensemble_output_not_written": (
        "failed to load 'PREFens', failed to poll from model repository\nPREFens: ensemble output 'OUTPUT1' "
        "for ensemble PREFens' is not used"),
    "output_depends_on_unwritten": (
        "failed to load 'PREFens', failed to poll from model repository\nPREFens: output 'OUTPUT0' for "
        "ensemble 'PREFens' is not written: at least one of its depending tensors, 'NOWHERE', is not "
        "connected"),
    "intermediate_unread": (
        "failed to load 'PREFens', failed to poll from model repository\nPREFens: ensemble tensor 'SPARE' is "
        "unused in ensemble 'PREFens'"),
    "input_without_dims": AT_LOAD.format(
        "model input 'IN' must specify 'dims' for PREFadd"),
    "zero_dim": AT_LOAD.format(
        "model input 'IN' dimension must be integer >= 1, or -1 to indicate a variable-size dimension "
        "for PREFadd"),
    "reshape_size_differs": AT_LOAD.format(
        "model input 'IN' has different size for dims and reshape for PREFadd"),
    "cpu_group_with_gpus": (
        "load failed for model 'PREFens': ensemble 'PREFens' depends on 'PREFadd' which has no loaded "
        "version. Model 'PREFadd' loading failed with error: version 1 is at UNAVAILABLE state: Invalid "
        "argument: instance group PREFadd_0 of model PREFadd has kind KIND_CPU but specifies one or more "
        "GPUs;"),
    "name_differs_from_folder": (
        "load failed for model 'PREFens': ensemble PREFens contains models that are not available or "
        "ambiguous: PREFadd\nPREFadd: unexpected directory name 'PREFadd' for model 'PREFother', directory "
        "name must equal model name"),
    "field_newer_than_release": (
        "failed to load 'PREFens', failed to poll from model repository\nPREFens: failed to read text proto "
        "from ROOT/field_newer_than_release/PREFens/config.pbtxt"),
    "step_model_missing": (
        "load failed for model 'PREFens': ensemble PREFens contains models that are not available or "
        "ambiguous: PREFgone"),
    "own_error_and_missing_step": (
        "failed to load 'PREFens', failed to poll from model repository\nPREFens: optimization should not be "
        "specified for ensemble 'PREFens'"),
    "step_without_version_folder": (
        "load failed for model 'PREFens': ensemble 'PREFens' depends on 'PREFadd' which has no loaded "
        "version. Model 'PREFadd' loading failed with error: at least one version must be available under "
        "the version policy of model 'PREFadd'"),
    "ensemble_without_version_folder": (
        "load failed for model 'PREFens': at least one version must be available under the version policy of "
        "model 'PREFens'"),
    "step_without_model_version": (
        "load failed for model 'PREFens': ensemble 'PREFens' depends on 'PREFadd' whose required version 0 "
        "is not loaded."),
    "step_asks_missing_version": (
        "load failed for model 'PREFens': ensemble 'PREFens' depends on 'PREFadd' whose required version 2 "
        "is not loaded."),
    "policy_leaves_asked_version_out": (
        "load failed for model 'PREFens': ensemble 'PREFens' depends on 'PREFadd' whose required version 2 "
        "is not loaded."),
    "latest_leaves_asked_version_out": (
        "load failed for model 'PREFens': ensemble 'PREFens' depends on 'PREFadd' whose required version 1 "
        "is not loaded."),
    "ensemble_batch_exceeds_step": (
        "load failed for model 'PREFens': ensemble PREFens allows maximum batch size 8, but it contains "
        "model PREFadd which only allows maximum batch size to be 4"),
    "input_map_key_unknown": (
        "load failed for model 'PREFens': in ensemble PREFens, ensemble tensor INPUT0 is mapping to "
        "non-existing input EXTRA in model PREFadd"),
    "required_input_unmapped": (
        "load failed for model 'PREFens': in ensemble PREFens, input IN2 in model PREFadd is not mapped to "
        "any ensemble tensors"),
    "output_map_key_unknown": (
        "load failed for model 'PREFens': in ensemble PREFens, ensemble tensor OUTPUT1 is mapped from "
        "non-existing output NOPE in model PREFadd"),
    "dtype_mismatch": (
        "load failed for model 'PREFens': in ensemble PREFens, ensemble tensor INPUT0: inconsistent data "
        "type: TYPE_FP32 is inferred from model PREFens while TYPE_INT32 is inferred from model PREFadd"),
    "shape_mismatch": (
        "load failed for model 'PREFens': in ensemble PREFens, ensemble tensor INPUT0: inconsistent shape: "
        "[4] is inferred from model PREFens while [5] is inferred from model PREFadd"),
    "ensemble_platform_without_scheduling": (
        "failed to load 'PREFens', failed to poll from model repository\nPREFens: ensemble scheduling must be "
        "set for ensemble PREFens whose platform is ensemble"),
    "default_priority_level_out_of_range": (
        "load failed for model 'PREFens': ensemble PREFens contains models that are not available or "
        "ambiguous: PREFadd\nPREFadd: default priority level must be in range [1, 2] for PREFadd"),
    "priority_queue_policy_level_out_of_range": (
        "load failed for model 'PREFens': ensemble PREFens contains models that are not available or "
        "ambiguous: PREFadd\nPREFadd: priority queue policy must have priority level in range [1, 2] for "
        "PREFadd"),
    "preserve_ordering_with_priorities": (
        "load failed for model 'PREFens': ensemble PREFens contains models that are not available or "
        "ambiguous: PREFadd\nPREFadd: Only one priority level is allowed when 'preserve_ordering' is true for "
        "PREFadd"),
    "preserve_ordering_with_delay": (
        "load failed for model 'PREFens': ensemble PREFens contains models that are not available or "
        "ambiguous: PREFadd\nPREFadd: Queue policy can not have DELAY as timeout action when "
        "'preserve_ordering' is true for PREFadd"),
    "sequence_batching_with_response_cache": (
        "load failed for model 'PREFens': ensemble PREFens contains models that are not available or "
        "ambiguous: PREFadd\nPREFadd: Response Cache does not currently support model PREFadd with sequence "
        "batching scheduler. Please disable the response cache."),
    "sequence_preferred_batch_size_too_big": (
        "load failed for model 'PREFens': ensemble PREFens contains models that are not available or "
        "ambiguous: PREFadd\nPREFadd: sequence batching preferred batch size must be <= max batch size for "
        "PREFadd"),
    "sequence_slot_utilization_out_of_range": (
        "load failed for model 'PREFens': ensemble PREFens contains models that are not available or "
        "ambiguous: PREFadd\nPREFadd: sequence batching minimum slot utilization must be in range (0.0, 1.0] "
        "for PREFadd"),
    "decoupled_with_response_cache": (
        "load failed for model 'PREFens': ensemble PREFens contains models that are not available or "
        "ambiguous: PREFadd\nPREFadd: Response Cache does not currently support model PREFadd with "
        "'decoupled' transaction policy. Please disable the response cache."),
    "tensor_without_name": AT_LOAD.format(
        "model input must specify 'name' for PREFadd"),
    "tensor_without_data_type": AT_LOAD.format(
        "model input 'IN' must specify 'data_type' for PREFadd"),
    "empty_reshape_without_batching": AT_LOAD.format(
        "model input 'IN' cannot have empty reshape for non-batching model as scalar tensors are not "
        "supported for PREFadd"),
    "zero_in_reshape": AT_LOAD.format(
        "model input 'IN' reshape dimensions must be integer >= 1, or -1 to indicate a variable-size "
        "dimension for PREFadd"),
    "nchw_without_3_dims": AT_LOAD.format(
        "model input NHWC/NCHW require 3 dims for PREFadd"),
    "shape_tensor_off_tensorrt": AT_LOAD.format(
        "shape tensors are only supported for TensorRT platform for PREFadd"),
    "non_linear_io_off_tensorrt": AT_LOAD.format(
        "Non-linear IO format is only supported for the TensorRT platform for PREFadd"),
    "batch_input_two_sources": AT_LOAD.format(
        "batch input kind 'BATCH_ELEMENT_COUNT' expects 1 source input, got 2 for PREFadd"),
    "batch_input_wrong_type": AT_LOAD.format(
        "batch input data type must be TYPE_INT32 or TYPE_FP32 for PREFadd"),
    "batch_input_unknown_source": AT_LOAD.format(
        "unknown source input name 'NO' for PREFadd"),
    "batch_output_unknown_source": AT_LOAD.format(
        "unknown source input name 'NO' for PREFadd"),
    "batch_output_unknown_target": AT_LOAD.format(
        "unknown target output name 'NO' for PREFadd"),
    "profile_off_tensorrt": (
        "load failed for model 'PREFens': ensemble 'PREFens' depends on 'PREFadd' which has no loaded "
        "version. Model 'PREFadd' loading failed with error: version 1 is at UNAVAILABLE state: Invalid "
        "argument: instance group PREFadd_0 of model PREFadd and platform specifies profile field which is "
        "only supported for TensorRT models;"),
    "step_is_the_ensemble": (
        "load failed for model 'PREFens': circular dependency between ensembles: PREFens -> ... -> PREFens "
        "-> PREFens"),
    "tensor_written_twice_by_one_step": (
        "failed to load 'PREFens', failed to poll from model repository\nPREFens: ensemble tensor 'OUTPUT0' "
        "can appear in an output map only once for ensemble 'PREFens' step 0"),
    "ensembles_in_a_circle": (
        "load failed for model 'PREFens': circular dependency between ensembles: PREFens -> ... -> PREFinner "
        "-> PREFens"),
    "decoupled_branches_joined": (
        "load failed for model 'PREFens': in ensemble PREFens, step of model 'PREFens' receives inputs "
        "originated from different decoupled models"),
    "force_cpu_only_not_yes_or_no": (
        "load failed for model 'PREFens': ensemble 'PREFens' depends on 'PREFadd' which has no loaded "
        "version. Model 'PREFadd' loading failed with error: version 1 is at UNAVAILABLE state: Unsupported: "
        "Incorrect value for FORCE_CPU_ONLY_INPUT_TENSORS: true';"),
    "auto_complete_gives_other_shape": (
        "load failed for model 'PREFens': in ensemble PREFens, ensemble tensor INPUT0: inconsistent shape: [4] is "
        "inferred from model PREFens while [5] is inferred from model PREFadd"),
    "auto_complete_config_raises": (
        "load failed for model 'PREFens': ensemble 'PREFens' depends on 'PREFadd' which has no loaded version. "
        "Model 'PREFadd' loading failed with error: version 1 is at UNAVAILABLE state: Internal: ValueError: no "
        "tokenizer here\n\nAt:\n  ROOT/auto_complete_config_raises/PREFadd/1/model.py(4): auto_complete_config\n;"),
}
