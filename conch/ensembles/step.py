"""The step every backend is: a template that owns what all backends share (the production/local fork,
I/O declared or read from the model file and checked against it, label files, notes, build facts), so a
backend supplies only what is its own. Calling a step wires it into an ensemble (``Ensemble.call``)."""

from __future__ import annotations

import abc
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from conch.ensembles.config import InstanceGroup, InstanceKind, StepSettings
from conch.ensembles.config_fields import ConfigFields
from conch.ensembles.layout import FileSource, ModelSpec, Platform, StepLayout
from conch.ensembles.names import check_model_name
from conch.ensembles.target import Release, Target
from conch.ensembles.tensors import Tensor, dims_compatible
from conch.errors import BuildError, DeclarationError


@dataclass(frozen=True)
class ModelIO:
    """The inputs and outputs a model file declares, as Triton tensors; ``file`` names it in messages."""

    file: str
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]


@dataclass(frozen=True)
class BackendFiles:
    """A backend's own files for a release (paths in the model folder), notes for the build's report, and
    facts of the build for the manifest."""

    files: Mapping[str, FileSource]
    notes: tuple[str, ...] = ()
    info: Mapping[str, object] = field(default_factory=dict)


class Step(abc.ABC):
    """A model in an ensemble. A backend states its ``kind`` and ``platform`` once, and supplies its files
    for a release (``backend_files``), its local stand-in (``standin``) and, if its model file declares
    I/O, how to read it (``model_io``)."""

    #: Human name of the backend, as used in messages and the manifest.
    kind: ClassVar[str] = "step"
    #: How Triton runs the step in production: its config's platform or backend.
    platform: ClassVar[Platform]
    #: What the local stand-in runs, for the build's note (e.g. "torch on the CPU").
    standin_runs: ClassVar[str] = ""
    #: What declared I/O is checked against, in messages (for backends that read I/O from their file).
    io_source: ClassVar[str] = "the model file"
    #: Facts of a build for the local target, for the manifest (e.g. that no plan was compiled).
    local_info: ClassVar[Mapping[str, object]] = {}
    #: Whether laying the step out runs code beyond conch's (an export, a framework's loader): the build
    #: then captures what that code says, for its report.
    lays_out_with_code: ClassVar[bool] = True

    def pure_code(self) -> Any:
        """The user code the step is declared pure over (``pure=True``), which a build keys by content; None
        when it declares none (a model file is keyed by its bytes)."""
        return None

    def runs_pure(self) -> bool:
        """Whether what the step computes when run in this process follows from its laid-out files (their
        content), conch's code and the installed libraries alone, so a run's findings may be remembered by
        those (``conch.builder.observe``). A step that runs user code says so only when declared pure."""
        return True

    def __init__(
        self,
        name: str,
        inputs: Sequence[Tensor] | None,
        outputs: Sequence[Tensor] | None,
        settings: StepSettings,
    ) -> None:
        """``inputs``/``outputs`` None: read them from the model file (``model_io``)."""
        self.name = check_model_name(name, f"{self.kind} step")
        self.settings = settings
        if inputs is None or outputs is None:
            found = self._read_io([t for t in (*(inputs or ()), *(outputs or ())) if isinstance(t, Tensor)])
            inputs = found.inputs if inputs is None else inputs
            outputs = found.outputs if outputs is None else outputs
        self.inputs = tuple(inputs)
        self.outputs = tuple(outputs)
        self._check_io()

    def _read_io(self, declared: Sequence[Tensor]) -> ModelIO:
        why = self.io_unreadable()
        found = None if why else self.model_io(declared)
        if found is None:
            raise DeclarationError(
                f"{self.kind} step {self.name!r}: {why or 'its model file declares no I/O'}, so declare inputs= "
                f"and outputs= (they are checked against {self.io_source} when it is built)"
            )
        return found

    def _check_io(self) -> None:
        if not self.outputs:
            raise DeclarationError(f"step {self.name!r}: declare at least one output")
        for group, what in ((self.inputs, "input"), (self.outputs, "output")):
            seen: set[str] = set()
            for t in group:
                if not isinstance(t, Tensor):
                    raise DeclarationError(f"step {self.name!r}: {what}s must be conch.Tensor, got {t!r}")
                if t.name in seen:
                    raise DeclarationError(f"step {self.name!r}: {what} {t.name!r} is declared twice")
                seen.add(t.name)
        for t in self.inputs:
            if t.labels is not None:
                raise DeclarationError(f"step {self.name!r}: labels belong on outputs, not input {t.name!r}")

    @property
    def max_batch_size(self) -> int:
        return self.settings.max_batch_size

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Wire this step into the ensemble its input handles belong to; return its output handle (or
        ``Outputs`` for several). See ``Ensemble.call``."""
        values = [*args, *kwargs.values()]
        if not values:
            raise DeclarationError(f"step {self.name!r}: call it with at least one tensor handle")
        ensemble = getattr(values[0], "ensemble", None)
        if ensemble is None:
            raise DeclarationError(
                f"step {self.name!r}: inputs must be tensor handles (from ensemble.input() or another "
                f"step), got {type(values[0]).__name__}"
            )
        return ensemble.call(self, *args, **kwargs)

    # -- what a backend supplies -------------------------------------------------------------------

    @abc.abstractmethod
    def backend_files(self, model_name: str, release: Release, ensemble: str) -> BackendFiles:
        """The backend's own files in production (``ensemble`` names it in runtime errors)."""

    @abc.abstractmethod
    def standin(self) -> Step:
        """The Python-backend model with this step's name, I/O and settings that runs it on the local CPU
        server (a Python step is its own)."""

    def model_io(self, declared: Sequence[Tensor]) -> ModelIO | None:
        """The I/O the model file declares, or None when the backend reads none. ``declared`` (what is
        declared so far) fills in what a file leaves open, e.g. a rank a graph does not know."""
        return None

    def io_unreadable(self) -> str | None:
        """Why the model file's I/O cannot be read at declaration (e.g. the model is a function a build
        calls), or None."""
        return None

    def check(self, release: Release) -> None:
        """Build-time checks against artifacts and the release (raise BuildError): the declared I/O against
        the model file's; backends add their own."""
        found = self.model_io((*self.inputs, *self.outputs))
        if found is not None:
            check_against_file(self.name, "input", self.inputs, found.inputs, found.file)
            check_against_file(self.name, "output", self.outputs, found.outputs, found.file)
        for name, path in self.settings.warmup_files.items():
            if not path.is_file():
                raise BuildError(f"step {self.name!r}: warmup file {name!r} points at {path}, which does not exist")

    def check_settings(self) -> dict[str, object]:
        """Settings that change what ``check`` verifies beyond the step's summary in the manifest: part of the
        key under which a build remembers that the checks passed (so a weaker check never vouches for a
        stronger one)."""
        return {}

    def details(self) -> dict[str, object]:
        """Backend settings for the manifest, recorded under the step's kind; default: none."""
        return {}

    def standin_note(self, model_name: str) -> str:
        """The build's note that the local target runs a stand-in."""
        return f"{model_name}: {self.platform} runs locally as a Python-backend stand-in ({self.standin_runs})"

    # -- the template ------------------------------------------------------------------------------

    def layout(self, model_name: str, target: Target, release: Release, ensemble: str) -> StepLayout:
        """The config and files of this step for a target: in production the backend's own files; on the
        local target its stand-in's, with GPU instance groups run on the CPU."""
        if target is Target.LOCAL:
            standin = self.standin()
            if standin is not self:
                inner = standin.layout(model_name, target, release, ensemble)
                notes = (*inner.notes, self.standin_note(model_name))
                return StepLayout(inner.spec, inner.files, notes, self.local_info)
        own = self.backend_files(model_name, release, ensemble)
        spec, notes = self.spec(model_name), own.notes
        if target is Target.LOCAL:
            spec, local = cpu_instances(spec)
            notes = (*notes, *local)
        warmup = {f"warmup/{name}": path for name, path in self.settings.warmup_files.items()}
        return StepLayout(spec, {**own.files, **self.label_files(), **warmup}, notes, own.info)

    def spec(self, model_name: str) -> ModelSpec:
        """This step's config in production."""
        return ModelSpec(model_name, self.inputs, self.outputs, self.platform, self.settings)

    def label_files(self) -> dict[str, FileSource]:
        """Label files of classification outputs, laid out next to config.pbtxt."""
        files: dict[str, FileSource] = {}
        for t in self.outputs:
            if t.labels is None or t.label_filename is None:
                continue
            if isinstance(t.labels, Path):
                files[t.label_filename] = t.labels
            else:
                files[t.label_filename] = ("\n".join(t.labels) + "\n").encode()
        return files


def positional_io(
    cls: str, legacy: Sequence[Any], inputs: Sequence[Tensor] | None, outputs: Sequence[Tensor] | None
) -> tuple[Sequence[Tensor] | None, Sequence[Tensor] | None]:
    """``inputs`` and ``outputs``, also when given the old way (positionally after the source: deprecated, kept
    one release with a DeprecationWarning naming the new spelling)."""
    if not legacy:
        return inputs, outputs
    if len(legacy) > 2 or (inputs is not None and legacy) or (outputs is not None and len(legacy) > 1):
        raise DeclarationError(f"{cls}(name, source, *, inputs=..., outputs=...): inputs and outputs are keyword "
                               f"arguments; got {len(legacy)} more positional argument(s) after the source")
    warnings.warn(f"{cls}(name, source, inputs, outputs) is deprecated: pass them by keyword, {cls}(name, source, "
                  "inputs=[...], outputs=[...]); the positional form goes in the next release",
                  DeprecationWarning, stacklevel=3)
    return legacy[0], legacy[1] if len(legacy) > 1 else outputs


def renamed_source(cls: str, old: str, value: Any, source: Any) -> Any:
    """The model source, also when given by its old keyword (``code=``, ``folder=``, ``pipeline=``, ``model=``,
    ``graph=``, ``onnx=``: deprecated, kept one release with a DeprecationWarning naming the new spelling)."""
    if value is None:
        return source
    if source is not None:
        raise DeclarationError(f"{cls}: give the model source once, as the second argument (not also {old}=)")
    warnings.warn(f"{cls}({old}=...) is deprecated: give the model source as the second argument, {cls}(name, "
                  f"source, inputs=..., outputs=...); {old}= goes in the next release", DeprecationWarning,
                  stacklevel=3)
    return value


def pure_flag(what: str, pure: bool, cache: bool | None, call: str) -> bool:
    """``pure=``, also when given as ``cache=`` (its old name: kept one release with a DeprecationWarning naming
    ``pure=``); ``call`` spells the call in the warning (``PythonStep``, ``Ensemble.sample``)."""
    if cache is not None:
        warnings.warn(f"{call}(cache=...) is deprecated: it says the code is pure, so write {call}(..., pure=True); "
                      "cache= goes in the next release", DeprecationWarning, stacklevel=3)
        if pure and not cache:
            raise DeclarationError(f"{what}: pure=True and cache=False disagree; give pure= alone")
        pure = pure or cache
    if not isinstance(pure, bool):
        raise DeclarationError(f"{what}: pure must be True or False, got {pure!r}")
    return pure


def cpu_instances(spec: ModelSpec) -> tuple[ModelSpec, list[str]]:
    """The spec with GPU instance groups run on the CPU, for the local server that has no GPU."""
    groups = spec.settings.instance_groups
    carried = spec.settings.config_fields.get("instance_group")
    if carried is not None:
        return _cpu_carried_instances(spec)
    if not any(g.kind is InstanceKind.GPU for g in groups):
        return spec, []
    cpu = tuple(InstanceGroup(InstanceKind.CPU, g.count) if g.kind is InstanceKind.GPU else g for g in groups)
    note = f"{spec.name}: KIND_GPU instance groups run as KIND_CPU on the local target"
    return replace(spec, settings=replace(spec.settings, instance_groups=cpu)), [note]


def _cpu_carried_instances(spec: ModelSpec) -> tuple[ModelSpec, list[str]]:
    """The same for instance groups given in config_fields (e.g. with a rate_limiter)."""
    from google.protobuf import text_format

    config = spec.settings.config_fields.message()
    gpu = config.instance_group[0].KIND_GPU
    moved = False
    for group in config.instance_group:
        if group.kind == gpu:
            group.kind = group.KIND_CPU
            del group.gpus[:]
            moved = True
    if not moved:
        return spec, []
    fields = ConfigFields(text_format.MessageToString(config))
    note = f"{spec.name}: KIND_GPU instance groups run as KIND_CPU on the local target"
    return replace(spec, settings=replace(spec.settings, config_fields=fields)), [note]


def check_against_file(
    step: str, what: str, declared: Sequence[Tensor], in_file: Sequence[Tensor], file_name: str
) -> None:
    """Declared tensors must exist in the model file with the same dtype and compatible dims."""
    found = {t.name: t for t in in_file}
    for t in declared:
        actual = found.get(t.name)
        if actual is None:
            raise BuildError(
                f"step {step!r}: {what} {t.name!r} is not in {file_name}, whose {what}s are "
                f"{', '.join(repr(n) for n in found)}"
            )
        if actual.dtype is not t.dtype:
            raise BuildError(
                f"step {step!r}: {what} {t.name!r} is declared {t.dtype.wire} but {file_name} has "
                f"{actual.dtype.wire}"
            )
        shape = t.reshape if t.reshape is not None else t.dims
        if not dims_compatible(shape, actual.dims):
            raise BuildError(
                f"step {step!r}: {what} {t.name!r} is declared with dims {list(shape)} but {file_name} has "
                f"{list(actual.dims)}"
            )
