"""Read an existing model repository (a folder, or an MME .tar.gz unpacked by the safe extraction) into
its models' typed configs, its ensembles, and what lies beside them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conch.archive.completed_config import auto_completed
from conch.archive.extract import safe_extract
from conch.archive.manifest import MANIFEST_NAME, Manifest, parse_manifest
from conch.compiler.config_reader import ReadConfig, read_config
from conch.compiler.pbtxt import parse_config
from conch.ensembles.layout import Platform
from conch.ensembles.target import DEFAULT_RELEASE
from conch.errors import BuildError, ConchError


@dataclass(frozen=True)
class ModelFolder:
    """One model of the repository: its folder, its parsed config and what conch's reader made of it."""

    name: str
    folder: Path
    config: Any  # ModelConfig
    read: ReadConfig
    declared: bool = False  # an ensemble conch declares around a single model: no folder of the source

    @property
    def platform(self) -> Platform:
        return self.read.spec.served_by


@dataclass
class Repository:
    """The models of one repository, by name, and the entries beside them."""

    source: Path
    root: Path
    models: dict[str, ModelFolder] = field(default_factory=dict)
    beside: list[str] = field(default_factory=list)  # top-level entries that are not models
    manifest: Manifest | None = None
    messages: list[str] = field(default_factory=list)  # "<file>: <field>: why" for what cannot be read

    @property
    def ensembles(self) -> list[ModelFolder]:
        return [m for m in self.models.values() if m.platform is Platform.ENSEMBLE]


def archive_stem(path: Path) -> str:
    name = path.name
    for suffix in (".tar.gz", ".tgz", ".tar"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return path.stem


def open_source(source: Path, unpack_to: Path) -> Repository:
    """A repository folder as it is, or an archive unpacked (safely) into ``unpack_to/<archive name>``."""
    source = Path(source)
    if source.is_dir():
        root = source
    elif source.is_file():
        root = unpack_to / archive_stem(source)
        if root.exists() and any(root.iterdir()):
            raise BuildError(f"{source}: {root} exists already (from an earlier import?); remove it or give "
                             "another --out")
        safe_extract(source, root)
    else:
        raise BuildError(f"{source}: no such folder or archive; give a model repository folder or an MME .tar.gz")
    return read_repository(source, root)


def read_repository(source: Path, root: Path) -> Repository:
    """Every ``<model>/config.pbtxt`` under ``root`` read into conch's spec; ``root`` itself when it is one model
    folder (its config.pbtxt at its root, as a single-model archive may be packed): a repository of that folder."""
    entries = sorted(root.iterdir())
    if (root / "config.pbtxt").is_file():
        root, entries = root.parent, [root]
    repo = Repository(source, root)
    for entry in entries:
        config_file = entry / "config.pbtxt"
        where = f"{entry.name}/config.pbtxt"
        completed = None
        if entry.is_dir() and not config_file.is_file():  # a Python model Triton auto-completes (SageMaker's flags)
            completed = auto_completed(entry, entry.name, f"{entry.name}/", DEFAULT_RELEASE)
            if completed is not None and completed.text is None:
                raise BuildError(f"{completed.file}: {completed.message}")
        if not entry.is_dir() or not (config_file.is_file() or completed is not None):
            if entry.name == MANIFEST_NAME:
                repo.manifest = parse_manifest(entry.read_bytes(), source)
            repo.beside.append(entry.name)
            continue
        if completed is not None and completed.text is not None:
            repo.messages.append(f"{where}: none; Triton completes it from {entry.name}/<version>/model.py's "
                                 "auto_complete_config (auto-complete is on in SageMaker's image): conch declares "
                                 "the config it gives")
        text = config_file.read_text(encoding="utf-8") if completed is None else str(completed.text)
        config = parse_config(text, where)
        if config.name and config.name != entry.name:
            repo.messages.append(f"{where}: name: {config.name!r} differs from its folder {entry.name!r} (Triton "
                                 "needs them equal); conch names the model after the folder")
        if not config.name:
            repo.messages.append(f"{where}: name: not given (Triton takes the folder's); conch writes "
                                 f"name: {entry.name!r}")
            config.name = entry.name
        if not config.output and config.platform != "ensemble":
            repo.messages.append(f"{where}: input/output: not declared (Triton completes them from the model "
                                 "file); conch declares them, read from the model file where it can")
        try:
            read = read_config(config, entry, where, strict=True)
        except ConchError as exc:
            repo.messages.append(str(exc))
            continue
        repo.models[entry.name] = ModelFolder(entry.name, entry, config, read)
        repo.messages.extend(f"{where}: {problem}" for problem in read.unexpressed)
    folders = [e for e in entries if e.is_dir() and not e.is_symlink()]
    if not repo.ensembles and len(repo.models) == 1 and len(folders) == 1:
        (model,) = repo.models.values()
        alone = _alone(model, archive_stem(source))
        repo.models[alone.name] = alone
        repo.messages.append(f"{model.name}/config.pbtxt: a single-model archive: declared as an ensemble "
                             f"{alone.name!r} of this one step, which `conch build` writes as the model alone")
    if not repo.ensembles:
        raise BuildError(f"{source}: no model folder holds an ensemble config (platform: \"ensemble\"); conch "
                         "import reads an ensemble and its steps, or a single-model archive (one model folder)")
    return repo


def _alone(model: ModelFolder, stem: str) -> ModelFolder:
    """An ensemble of one step, ``model``, under the model's own tensor names: what `conch build` writes as the
    model alone (a single-model archive). Named after the archive (or folder), unless that is the model's name."""
    if not model.config.input or not model.config.output:
        raise BuildError(f"{model.name}/config.pbtxt: a single model whose config declares no inputs or outputs; "
                         "conch import needs them to declare its callers' tensors: declare them in the config")
    name = stem if stem != model.name else f"{stem}_alone"
    config = type(model.config)(name=name, platform="ensemble", max_batch_size=model.config.max_batch_size)
    step = config.ensemble_scheduling.step.add(model_name=model.name, model_version=-1)
    for kind, tensors, mapping in (("input", config.input, step.input_map), ("output", config.output,
                                                                             step.output_map)):
        for t in getattr(model.config, kind):
            tensors.add(name=t.name, data_type=t.data_type, dims=t.dims, **({"optional": t.optional}
                                                                            if kind == "input" else {}))
            mapping[t.name] = t.name
    return ModelFolder(name, model.folder, config, read_config(config, model.folder, f"{name} (declared)",
                                                               strict=True), declared=True)
