"""`conch check`: read any MME archive the way SageMaker's Triton front end and Triton will, and report
what would fail (errors) or surprise (warnings), each with the file it is in.

The archive is unpacked with ``safe_extract`` (so every safety rule applies), then checked from its files
alone: no manifest and no declaration are needed, so hand-made archives are checked the same way.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from conch.archive.check_report import CheckReport, Model
from conch.archive.extract import safe_extract
from conch.archive.manifest import SHELL_SAFE
from conch.archive.wiring import check_wiring
from conch.compiler.config_reader import ReadConfig, WrittenTensor, read_config
from conch.compiler.pbtxt import ConfigParseError
from conch.errors import ArchiveError
from conch.scratch import scratch_temp
from conch.wire import json_refusal

# The regex SageMaker's front end (server src/sagemaker_server.cc) runs over each config's raw text.
ENSEMBLE_REGEX = re.compile(r'platform:(\s)*"ensemble"')
MANY_MODELS = 5  # past this many folders the front end warns about memory management
ENV_PREFIX = "$$TRITON_MODEL_DIRECTORY/"
ENV_DIR = "conch-envs"  # at the archive root, beside the model folders; not a model (no config.pbtxt)
# Folder and file names reach `bash -c` when Triton starts a Python stub: letters, digits and _ . - only.
SHELL_SAFE_PATH = re.compile(r"[A-Za-z0-9_.$/-]+")
MODEL_FILES = {
    "tensorrt_plan": ("model.plan",), "tensorrt": ("model.plan",),
    "onnxruntime_onnx": ("model.onnx",), "onnxruntime": ("model.onnx",),
    "pytorch_libtorch": ("model.pt",), "pytorch": ("model.pt", "model.py"),
    "tensorflow_graphdef": ("model.graphdef",), "tensorflow_savedmodel": ("model.savedmodel",),
    "python": ("model.py",), "dali": ("model.dali", "dali.py"),
}
ENV_ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar")


@contextmanager
def checked(archive: Path) -> Iterator[tuple[CheckReport, Path | None]]:
    """Unpack ``archive`` into a temp folder (refusing anything unsafe) and check it: the report, with the
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
        yield check_folder(folder, archive.name), folder


def check_folder(root: Path, archive: str) -> CheckReport:
    """Check an archive already unpacked at ``root`` (as replay stages it)."""
    report = CheckReport(archive)
    if (root / "config.pbtxt").exists():
        report.error("config.pbtxt", "a config.pbtxt at the archive root makes SageMaker load the archive as one "
                     "model, not an ensemble; put each model in its own folder at the root")
        return report
    folders = sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink())
    for link in sorted(p for p in root.iterdir() if p.is_symlink()):
        report.error(link.name, "is a symlink at the archive root; SageMaker only sees real folders as models")
    if len(folders) > MANY_MODELS:
        report.warning("", f"{len(folders)} folders at the root: past {MANY_MODELS}, SageMaker's Triton front end "
                       "warns 'Several model directories found' (smaller ensembles manage memory better)")
    models = {m.folder: m for m in (_read_model(p, report) for p in folders) if m is not None}
    report.models = len(models)
    report.configs = {name: m.config for name, m in models.items()}
    ensemble = _find_ensemble(models, report)
    for model in models.values():
        _check_model(model, root, report)
    if ensemble is not None:
        report.ensemble = ensemble.folder
        check_wiring(ensemble, models, report)
        refusal = json_refusal(_ensemble_tensors(ensemble.config))
        if refusal:
            report.warning(f"{ensemble.folder}/config.pbtxt", f"needs binary bodies: {refusal}")
    return report


def _ensemble_tensors(config: ReadConfig) -> list[tuple[str, str, str]]:
    """(kind, name, datatype) of an ensemble's inputs and outputs, the tensors a request body carries."""
    return ([("input", t.name, t.data_type.removeprefix("TYPE_")) for t in config.io("input")]
            + [("output", t.name, t.data_type.removeprefix("TYPE_")) for t in config.io("output")])


def _read_model(path: Path, report: CheckReport) -> Model | None:
    name = path.name
    if not SHELL_SAFE.fullmatch(name):
        report.error(f"{name}/", f"model folder {name!r} is not a safe name: Triton starts Python stubs through a "
                     "shell with this path; use ASCII letters, digits, '_', '.' and '-' only")
    config_path = path / "config.pbtxt"
    if not config_path.is_file():
        return None  # not a model (e.g. conch-envs/); Triton only loads what the ensemble names
    file = f"{name}/config.pbtxt"
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
    if config.name != name:
        report.error(file, f"names model {config.name!r}, but its folder is {name!r}; Triton refuses a config whose "
                     "name differs from its folder: make them equal")
    return Model(name, path, text, config)


def _find_ensemble(models: dict[str, Model], report: CheckReport) -> Model | None:
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
    if not ensembles:
        report.error("", "no model folder holds an ensemble config (platform: \"ensemble\"); SageMaker would serve "
                     "whichever folder it lists last; add the ensemble's folder with its config.pbtxt and 1/")
        return None
    if len(ensembles) > 1:
        report.error("", f"{len(ensembles)} ensembles ({', '.join(m.folder for m in ensembles)}): SageMaker serves "
                     "one per archive and picks whichever it lists last; build one archive per ensemble")
        return None
    return ensembles[0]


def versions_served(model: Model, report: CheckReport) -> list[str]:
    """The version folders Triton serves under the model's version policy (checking they exist)."""
    found = sorted((p.name for p in model.path.iterdir() if p.is_dir() and p.name.isdigit()), key=int)
    which, specific, latest = _version_policy(model.config)
    if which == "specific":
        missing = [str(v) for v in specific if str(v) not in found]
        if missing:
            report.error(f"{model.folder}/config.pbtxt", f"version_policy names version(s) {', '.join(missing)}, "
                         f"but the folder holds {', '.join(found) or 'no version folders'}; Triton fails to load it")
        return [str(v) for v in specific if str(v) in found]
    if not found:
        report.error(f"{model.folder}/", "has no version folder (1/); Triton loads nothing from it")
        return []
    if which == "all":
        return found
    return found[-max(latest, 1):]


def _version_policy(config: ReadConfig) -> tuple[str | None, tuple[int, ...], int]:
    """(which policy, its specific versions, its latest count) from the typed policy, or, for a policy conch
    cannot declare (e.g. versions other than 1), from the config's carried part."""
    typed = config.version_policy
    if typed is not None:
        which = "all" if typed.all else "specific" if typed.specific else "latest"
        return which, typed.specific, typed.latest or 1
    policy = config.carried.version_policy
    which = policy.WhichOneof("policy_choice")
    return which, tuple(policy.specific.versions), policy.latest.num_versions if which == "latest" else 1


def _check_model(model: Model, root: Path, report: CheckReport) -> None:
    config, file = model.config, f"{model.folder}/config.pbtxt"
    served = versions_served(model, report)
    if config.carried.model_transaction_policy.decoupled:
        report.error(file, "is a decoupled model, which SageMaker's front end refuses to serve")
    if config.is_ensemble:
        return
    kind = model.kind
    if not kind:
        report.error(file, "names neither platform nor backend; Triton cannot tell how to run it")
    default = config.carried.default_model_filename
    wanted = (default,) if default else MODEL_FILES.get(kind, ())
    if not wanted and kind:
        report.warning(file, f"conch does not know which model file backend {kind!r} needs; not checked")
    for version in served if wanted else []:
        if not any((model.path / version / name).exists() for name in wanted):
            report.error(f"{model.folder}/{version}/", f"lacks {' or '.join(wanted)}, the model file {kind} loads")
    for output in config.io("output"):
        labels = config.label_filename(output.name)
        if labels:
            _check_labels(model, output, labels, report)
    env = config.parameters.get("EXECUTION_ENV_PATH")
    if env is not None:
        _check_env(model, env, root, report)


def _check_labels(model: Model, output: WrittenTensor, label_filename: str, report: CheckReport) -> None:
    file = f"{model.folder}/{label_filename}"
    path = (model.path / label_filename).resolve()
    if not path.is_relative_to(model.path.resolve()):
        report.error(f"{model.folder}/config.pbtxt", f"output {output.name!r}: label_filename "
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
    file = f"{model.folder}/config.pbtxt"
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
