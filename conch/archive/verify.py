"""`conch check`: read any MME archive the way SageMaker's Triton front end and Triton will, and report
what would fail (errors) or surprise (warnings), each with the file it is in.

The archive is unpacked with ``safe_extract`` (so every safety rule applies), then checked from its files
alone: no manifest and no declaration are needed, so hand-made archives are checked the same way.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from conch.archive.check_report import CheckReport, Model
from conch.archive.completed_config import auto_completed
from conch.archive.extract import safe_extract
from conch.archive.load_rules import ModelFolder, check_load
from conch.archive.manifest import SHELL_SAFE, Manifest
from conch.archive.python_imports import archive_code, judge
from conch.archive.release_check import ENV_PREFIX, built_for, check_release
from conch.compiler.config_reader import ReadConfig, WrittenTensor, read_config
from conch.ensembles.backends_table import model_files
from conch.ensembles.target import DEFAULT_RELEASE, Release
from conch.errors import ArchiveError, BuildError, ConfigParseError
from conch.scratch import scratch_temp
from conch.wire import json_refusal

# The regex SageMaker's front end (server src/sagemaker_server.cc) runs over each config's raw text.
ENSEMBLE_REGEX = re.compile(r'platform:(\s)*"ensemble"')
MANY_MODELS = 5  # past this many folders the front end warns about memory management
ENV_DIR = "conch-envs"  # at the archive root, beside the model folders; not a model (no config.pbtxt)
# Folder and file names reach `bash -c` when Triton starts a Python stub: letters, digits and _ . - only.
SHELL_SAFE_PATH = re.compile(r"[A-Za-z0-9_.$/-]+")
ENV_ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar")
ROOT_MODEL = "model"  # the folder SageMaker unpacks into (/opt/ml/models/<hash>/model): a root config's model


@contextmanager
def checked(archive: Path, release: Release | str | None = None) -> Iterator[tuple[CheckReport, Path | None]]:
    """Unpack ``archive`` into a temp folder (refusing anything unsafe) and check it for Triton ``release`` (None:
    the release it was built for, else 24.10): the report, with the
    folder it unpacked into (None when the extraction refused the archive)
    until the block ends, for a caller that reads more of it."""
    archive = Path(archive)
    with scratch_temp("conch-check-") as tmp:
        folder = Path(tmp) / "archive"
        try:
            safe_extract(archive, folder)
        except ArchiveError as exc:
            report = CheckReport(archive.name)
            report.error("", str(exc))
            yield report, None
            return
        yield check_folder(folder, archive.name, release), folder


def is_model_repository(folder: Path) -> bool:
    """Whether ``folder`` is an unpacked model repository: a config.pbtxt at its root or in a folder of it, or a
    folder of it holding a Python model that Triton auto-completes (``<version>/model.py``)."""
    return ((folder / "config.pbtxt").is_file() or any(folder.glob("*/config.pbtxt"))
            or any(p.parent.name.isdigit() for p in folder.glob("*/*/model.py")))


def check_repository(folder: Path, release: Release | str | None = None) -> CheckReport:
    """`conch check` of an unpacked model repository, as the archive it would become (``tar -C folder -czf
    NAME.tar.gz .``): the archive's checks, and the one rule of unpacking a folder can break (a link leaving it)."""
    folder = Path(folder)
    report = check_folder(folder, folder.resolve().name, release)
    root = folder.resolve()
    for path in sorted(folder.rglob("*")):
        if path.is_symlink() and not path.resolve().is_relative_to(root):
            report.error(path.relative_to(folder).as_posix(), f"is a symlink to {os.readlink(path)!r}, outside "
                         "the folder: safe unpacking (conch's, and a link that lands nowhere on SageMaker) refuses "
                         "it; copy the file in")
    return report


def check_folder(root: Path, archive: str, release: Release | str | None = None) -> CheckReport:
    """Check an archive already unpacked at ``root`` (as replay stages it) for Triton ``release`` (None: the release
    its manifest says it was built for, else the default, 24.10), in the shape SageMaker's front end (server
    src/sagemaker_server.cc, the folder scan before ``POST /models``) gives it: a config.pbtxt at the root makes the
    archive one model; else one folder at the root is that model (a single-model archive); else the folder whose
    config matches the ensemble regex is served."""
    report = CheckReport(archive)
    manifest = built_for(root)  # read once: the release check needs it too
    if release is None:
        release = manifest.release if manifest is not None else DEFAULT_RELEASE
    if (root / "config.pbtxt").exists():
        _check_root_model(root, report, release, manifest)
        return report
    folders = sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink())
    for link in sorted(p for p in root.iterdir() if p.is_symlink()):
        report.error(link.name, "is a symlink at the archive root; SageMaker only sees real folders as models")
    if len(folders) > MANY_MODELS:
        report.warning("", f"{len(folders)} folders at the root: past {MANY_MODELS}, SageMaker's Triton front end "
                       "warns 'Several model directories found' (smaller ensembles manage memory better)")
    models = {m.folder: m for m in (_read_model(p, report, release=release) for p in folders) if m is not None}
    report.models = len(models)
    report.configs = {name: m.config for name, m in models.items()}
    single_name = single_model([p.name for p in folders], report.configs)
    single = models[single_name] if single_name is not None else None
    ensemble = None if single else _find_ensemble(models, report, folders)
    served = single or ensemble
    if single is not None:
        report.single = single.folder
    if ensemble is not None:
        report.ensemble = ensemble.folder
    # Triton's load rules (load_rules.py) over a plain description of the folders, each config parsed once; Triton
    # meets them before a backend looks for its model file. The served model is loaded under the TargetModel (a
    # model mapping), so its config's name may differ from its folder. Without one model SageMaker would serve,
    # each folder is judged as the model it might serve.
    described = {name: ModelFolder.read(m.path, m.config.message()) for name, m in models.items()}
    for name in [served.folder] if served is not None else list(models):
        check_load(described, name, report, release, mapped=True)
    for name, model in models.items():
        _check_model(model, described[name], root, report)
    check_release(root, models, release, report, manifest)
    _check_code(root, models, described, release, report, manifest)
    if served is not None:
        _check_body(served, report)
    return report


def _check_code(root: Path, models: Mapping[str, Model], described: Mapping[str, ModelFolder],
                release: Release | str, report: CheckReport, manifest: Manifest | None) -> None:
    """The Python-backend models' code against the release's image Python (python_imports.py). Not for an archive
    conch built for its local target: its stand-ins are conch's own code, for the local server."""
    if manifest is not None and manifest.target == "local":
        return
    code = [archive_code(root, m.path, m.prefix, described[name].versions_to_load(),
                         m.config.parameters.get("EXECUTION_ENV_PATH"))
            for name, m in models.items() if m.kind == "python"]
    for finding in judge(code, release).findings:
        (report.error if finding.level == "error" else report.warning)(finding.file, finding.message)


def single_model(folders: Collection[str], configs: Mapping[str, ReadConfig]) -> str | None:
    """The model folder of a single-model archive: the one folder at the root (``folders``), when it holds a model
    that is not an ensemble (SageMaker's front end serves the only folder it lists, whatever its config says)."""
    if len(folders) != 1:
        return None
    (name,) = folders
    return name if name in configs and not configs[name].is_ensemble else None


def _check_root_model(root: Path, report: CheckReport, release: Release | str, manifest: Manifest | None) -> None:
    """A config.pbtxt at the root: SageMaker loads the archive itself as one model, from the folder it unpacked
    into (``/opt/ml/models/<hash>/model``: its folder name is ``model``), its versions at the root."""
    model = _read_model(root, report, folder=ROOT_MODEL, prefix="")
    if model is None:
        return
    report.models, report.configs, report.single = 1, {ROOT_MODEL: model.config}, ROOT_MODEL
    hidden = sorted(p.name for p in root.iterdir() if p.is_dir() and (p / "config.pbtxt").is_file())
    if hidden:
        report.warning("config.pbtxt", f"makes SageMaker load the archive as one model, so the model folder(s) "
                       f"{', '.join(hidden)} at the root are not loaded; to serve an ensemble of them, remove the "
                       "config.pbtxt at the root")
    if model.config.is_ensemble:
        report.error("config.pbtxt", "is an ensemble at the archive root: its steps would have to be folders beside "
                     "it, but the root is this model's own folder; put the ensemble in a folder of its own (with "
                     "1/) beside its steps' folders")
        return
    described = replace(ModelFolder.read(root, model.config.message()), folder=ROOT_MODEL, prefix="")
    check_load({ROOT_MODEL: described}, ROOT_MODEL, report, release, mapped=True)
    _check_model(model, described, root, report)
    check_release(root, {ROOT_MODEL: model}, release, report, manifest)
    _check_code(root, {ROOT_MODEL: model}, {ROOT_MODEL: described}, release, report, manifest)
    _check_body(model, report)


def _check_body(model: Model, report: CheckReport) -> None:
    # (kind, name, datatype) of the served model's inputs and outputs, the tensors a request body carries
    refusal = json_refusal([(kind, t.name, t.data_type.removeprefix("TYPE_")) for kind in ("input", "output")
                            for t in model.config.io(kind)])
    if refusal:
        report.warning(f"{model.prefix}config.pbtxt", f"needs binary bodies: {refusal}")


def _auto_completed(path: Path, name: str, prefix: str, report: CheckReport, release: Release | str) -> Model | None:
    """A folder without config.pbtxt whose ``<version>/model.py`` Triton auto-completes, read by the completed
    config (completed_config.py); None when it is no such folder, or its completion fails (reported)."""
    completion = auto_completed(path, name, prefix, release)
    if completion is None:
        return None
    (report.error if completion.level == "error" else report.warning)(completion.file, completion.message)
    if completion.text is None:
        return None
    return Model(name, path, completion.text, read_config(completion.text, where=f"{prefix}model.py"), prefix)


def _read_model(path: Path, report: CheckReport, folder: str | None = None,
                prefix: str | None = None, release: Release | str | None = None) -> Model | None:
    """The model folder at ``path`` (``folder``, ``prefix``: its name and where its files are in the archive, for
    the archive root read as one model)."""
    name = folder or path.name
    if folder is None and not SHELL_SAFE.fullmatch(name):
        report.error(f"{name}/", f"model folder {name!r} is not a safe name: Triton starts Python stubs through a "
                     "shell with this path; use ASCII letters, digits, '_', '.' and '-' only")
    config_path = path / "config.pbtxt"
    prefix = f"{name}/" if prefix is None else prefix
    if not config_path.is_file():
        # a Python model Triton auto-completes (SageMaker's flags), or not a model (e.g. conch-envs/)
        return _auto_completed(path, name, prefix, report, release) if release is not None else None
    file = f"{prefix}config.pbtxt"
    try:
        text = config_path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        report.error(file, f"is not UTF-8 text ({exc}); write the config as UTF-8")
        return None
    try:
        config = read_config(text, where=file)
    except ConfigParseError as exc:
        report.error(file, f"does not parse as Triton's ModelConfig: {exc.reason}")
        return None
    if release is not None and config.served == "python" and _completes(path):
        return _completed_file(Model(name, path, text, config, prefix), report, release)
    if config.served in ONNX_SERVED and not config.inputs and not config.outputs:
        return _onnx_completed(Model(name, path, text, config, prefix), report)
    return Model(name, path, text, config, prefix)


ONNX_SERVED = ("onnxruntime_onnx", "onnxruntime")


def _onnx_completed(model: Model, report: CheckReport) -> Model:
    """An ONNX model whose config leaves its inputs and outputs out: ONNX Runtime's backend completes them from
    the model file with SageMaker's flags (auto-complete on), so conch reads them from the latest
    ``<version>/model.onnx`` and checks them (the file as written when it cannot be read: refused as Triton
    refuses a model it cannot complete)."""
    versions = sorted((p for p in model.path.glob("*/model.onnx") if p.parent.name.isdigit() and p.is_file()),
                      key=lambda p: int(p.parent.name))
    if not versions:
        return model
    from conch.backends.onnx import read_onnx_io  # onnx is read only for such a model

    where = f"{model.prefix}{versions[-1].parent.name}/model.onnx"
    try:
        inputs, outputs = read_onnx_io(versions[-1], model.config.max_batch_size > 0, model.folder)
    except BuildError:
        return model
    except ImportError:  # the onnx package is an extra: a base install cannot read the file
        report.warning(f"{model.prefix}config.pbtxt", f"names no inputs or outputs: ONNX Runtime's backend completes "
                       f"them from {where} with SageMaker's flags (auto-complete on); conch reads them with the onnx "
                       "package, which is not installed (pip install 'conch[onnx]'), so the config is judged as "
                       "written")
        return model
    message = model.config.message()
    for kind, tensors in (("input", inputs), ("output", outputs)):
        for tensor in tensors:
            getattr(message, kind).add(name=tensor.name, data_type=tensor.dtype.triton, dims=list(tensor.dims))
    report.warning(f"{model.prefix}config.pbtxt", f"names no inputs or outputs: ONNX Runtime's backend completes "
                   f"them from {where} with SageMaker's flags (auto-complete on), and conch checks them as read "
                   f"from it ({', '.join(t.name for t in (*inputs, *outputs))}); max_batch_size is judged as written "
                   "(the backend may raise a 0 when every first dimension is dynamic)")
    return replace(model, config=read_config(message, where=f"{model.prefix}config.pbtxt"))


def _completes(path: Path) -> bool:
    """Whether a Python model folder's latest model.py defines ``auto_complete_config`` (read as text: only such
    a model is run to complete its config)."""
    versions = sorted((p for p in path.glob("*/model.py") if p.parent.name.isdigit()), key=lambda p: int(p.parent.name))
    return bool(versions) and "auto_complete_config" in versions[-1].read_text(encoding="utf-8", errors="replace")


def _completed_file(model: Model, report: CheckReport, release: Release | str) -> Model:
    """A Python model whose config.pbtxt its ``auto_complete_config`` completes, as Triton with SageMaker's flags
    loads it (completed_config.py); the file as written when the completion fails (reported)."""
    completion = auto_completed(model.path, model.folder, model.prefix, release, config=model.text)
    if completion is None or completion.level == "ok" or completion.text is None:
        return model
    (report.error if completion.level == "error" else report.warning)(completion.file, completion.message)
    if completion.level == "error" or completion.text == model.text:
        return model
    return replace(model, config=read_config(completion.text, where=f"{model.prefix}config.pbtxt"))


def _find_ensemble(models: dict[str, Model], report: CheckReport, folders: list[Path]) -> Model | None:
    matched = [m for m in models.values() if ENSEMBLE_REGEX.search(m.text)]
    for m in models.values():
        file = f"{m.folder}/config.pbtxt"
        if m.config.is_ensemble and m not in matched:
            report.error(file, "is an ensemble, but SageMaker's front end only finds one whose text holds "
                         "`platform: \"ensemble\"` literally (regex platform:(\\s)*\"ensemble\"); write it so")
        if not m.config.is_ensemble and m in matched:
            report.error(file, "is not an ensemble, but its text matches SageMaker's ensemble regex "
                         "platform:(\\s)*\"ensemble\" (in a comment?), so SageMaker may serve it; remove that text")
    ensembles = [m for m in matched if m.config.is_ensemble]
    if not ensembles and not models:
        if not report.errors:  # else a folder that is not read as a model is named already
            report.error("", "holds no model folder (a folder with a config.pbtxt, or a Python model's "
                         "<version>/model.py that Triton auto-completes) at its root; put the model's folder "
                         "(config.pbtxt and 1/) at the archive root")
        return None
    if not ensembles:
        _no_ensemble(models, folders, report)
        return None
    if len(ensembles) > 1:
        report.error("", f"{len(ensembles)} ensembles ({', '.join(m.folder for m in ensembles)}): SageMaker serves "
                     "one per archive and picks whichever it lists last; build one archive per ensemble")
        return None
    return ensembles[0]


def _no_ensemble(models: dict[str, Model], folders: list[Path], report: CheckReport) -> None:
    """Several folders at the root and no ensemble: the front end serves the folder ``readdir`` lists last."""
    others = [p.name for p in folders if p.name not in models]
    if len(models) == 1 and others:
        (name,) = models
        report.error("", f"holds model folder {name} and {len(others)} other folder(s) at its root "
                     f"({', '.join(others)}) and no ensemble: SageMaker's front end serves whichever folder it lists "
                     f"last, which may be one without a model; move {', '.join(others)} into {name}/ so the archive "
                     "holds one folder (a single-model archive)")
    else:
        report.error("", "no model folder holds an ensemble config (platform: \"ensemble\"); SageMaker would serve "
                     "whichever folder it lists last; add the ensemble's folder with its config.pbtxt and 1/, or "
                     "pack one model folder per archive (a single-model archive)")


def _check_model(model: Model, described: ModelFolder, root: Path, report: CheckReport) -> None:
    """A model folder's files (its model file in each version Triton loads, labels, environment), ``described``
    as the load rules read it (load_rules reports when no version loads)."""
    config, file = model.config, f"{model.prefix}config.pbtxt"
    served = [str(v) for v in described.versions_to_load()]
    if config.carried.model_transaction_policy.decoupled:
        report.error(file, "is a decoupled model, which SageMaker's front end refuses to serve")
    if config.is_ensemble:
        return
    kind = model.kind
    default = config.carried.default_model_filename
    wanted = (default,) if default else model_files(kind, config.carried.runtime)
    if not wanted and kind:
        report.warning(file, f"conch does not know which model file backend {kind!r} needs; not checked")
    for version in served if wanted else []:
        if not any((model.path / version / name).exists() for name in wanted):
            report.error(f"{model.prefix}{version}/", f"lacks {' or '.join(wanted)}, the model file {kind} loads")
    for output in config.io("output"):
        labels = config.label_filename(output.name)
        if labels:
            _check_labels(model, output, labels, report)
    env = config.parameters.get("EXECUTION_ENV_PATH")
    if env is not None:
        _check_env(model, env, root, report)


def _check_labels(model: Model, output: WrittenTensor, label_filename: str, report: CheckReport) -> None:
    file = f"{model.prefix}{label_filename}"
    path = (model.path / label_filename).resolve()
    if not path.is_relative_to(model.path.resolve()):
        report.error(f"{model.prefix}config.pbtxt", f"output {output.name!r}: label_filename "
                     f"{label_filename!r} points outside the model folder; put the labels file in it")
        return
    if not path.is_file():
        report.error(file, f"is missing: output {output.name!r} names it as its label_filename")
        return
    lines = len(path.read_bytes().splitlines())
    classes = 1
    for d in output.dims:
        classes *= d
    if all(d > 0 for d in output.dims) and lines != classes:
        report.error(file, f"has {lines} labels, but output {output.name!r} has {classes} classes (dims "
                     f"{list(output.dims)}); write one label per class")


def _check_env(model: Model, value: str, root: Path, report: CheckReport) -> None:
    file = f"{model.prefix}config.pbtxt"
    if not value.startswith(ENV_PREFIX):
        report.error(file, f"EXECUTION_ENV_PATH {value!r} must start with {ENV_PREFIX} (the Python backend resolves "
                     "it against the model folder on the instance); point it at the environment in the archive")
        return
    if not SHELL_SAFE_PATH.fullmatch(value):
        report.error(file, f"EXECUTION_ENV_PATH {value!r} holds characters a shell would interpret; Triton runs it "
                     "through `bash -c`: use ASCII letters, digits, '_', '.', '-' and '/'")
        return
    path = (model.path / value[len(ENV_PREFIX):]).resolve()
    if not path.is_relative_to(root.resolve()):
        report.error(file, f"EXECUTION_ENV_PATH {value!r} points outside the archive; ship the environment in it")
        return
    rel = path.relative_to(root.resolve()).as_posix()
    if path.is_dir():
        if not (path / "bin" / "activate").is_file():
            report.error(rel, "is an environment folder without bin/activate at its root; Triton cannot activate it")
    elif not path.is_file():
        report.error(rel, f"is missing: {model.folder}'s EXECUTION_ENV_PATH points at it")
    elif not path.name.endswith(ENV_ARCHIVE_SUFFIXES):
        report.error(rel, "is not a .tar.gz or .tar: the Python backend unpacks only those (a .tar.xz also breaks "
                     "every later environment load until the server restarts)")
