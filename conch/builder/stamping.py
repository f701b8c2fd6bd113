"""Stamping: give an archive's step models names of their own for one TargetModel, before it is uploaded.

Why: SageMaker's Triton image runs ``--model-namespacing=true``, and Triton (2.51 at least) then polls an
ensemble step's ``model_name`` in every repository holding a folder of that name, so copies and versions of
one archive that keep the same step names reload each other on every load and unload, and crashed the server
here. A stamped archive's steps are found only in its own repository.

A stamp is a pure function of the archive's bytes and the TargetModel name: each step folder ``s`` becomes
``stamped_name(s, target_model)``, with its config's ``name`` and the ensemble's ``model_name`` for it rewritten
through Triton's ModelConfig proto; model files are untouched, and the ensemble keeps its folder (SageMaker's
front end serves it under the TargetModel's name anyway). The manifest records the stamp and the original
names, so stamping a stamped archive again starts from the original names (``stamp(stamp(a, x), y) ==
stamp(a, y)``, and stamping with its own name changes nothing).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from conch.archive.extract import safe_extract
from conch.archive.manifest import MANIFEST_NAME, SHELL_SAFE, Manifest, StampRecord, dumps, parse_manifest, sha256
from conch.archive.verify import ENV_PREFIX, check_folder
from conch.atomic_write import atomic_output
from conch.builder.archive import write_tar
from conch.compiler.config_reader import ReadConfig
from conch.ensembles.layout import FileSource
from conch.errors import ArchiveError
from conch.scratch import scratch_temp

ARCHIVE_SUFFIX = ".tar.gz"
TAG = "__t"  # a stamped step is <original step>__t<10 hex digits of sha256(TargetModel)>


def stamped_name(step: str, target_model: str, attempt: int = 0) -> str:
    """The name ``step`` takes in ``target_model``'s copy of the archive: shell-safe, the same every time.

    ``attempt`` > 0 gives further names for the rare caller that must avoid a name already taken."""
    tag = hashlib.sha256(f"{target_model}#{attempt}".encode()).hexdigest()[:10]
    return f"{step}{TAG}{tag}"


def target_model_of(name: str) -> str:
    """``name`` as a TargetModel: the archive's file name under the prefix (``.tar.gz`` added if missing)."""
    if not name or "/" in name or not SHELL_SAFE.fullmatch(name):
        raise ArchiveError(f"TargetModel {name!r}: give a file name of ASCII letters, digits, '_', '.' and '-' "
                           "(e.g. text-v2 or text-v2.tar.gz); it becomes the archive's name under the S3 prefix")
    return name if name.endswith(ARCHIVE_SUFFIX) else f"{name}{ARCHIVE_SUFFIX}"


def step_models(configs: Mapping[str, ReadConfig]) -> list[str]:
    """The model folders some ensemble of the archive calls as a step."""
    called = {s.model_name for c in configs.values() for s in c.ensemble_steps}
    return sorted(called & set(configs))


def restamp_configs(configs: Mapping[str, ReadConfig],
                    renames: Mapping[str, str]) -> dict[str, model_config_pb2.ModelConfig]:
    """The configs that ``renames`` ({folder: new name}) changes, keyed by their old folder, rewritten: the
    renamed models' ``name``, the ensembles' ``model_name`` for them, and an EXECUTION_ENV_PATH that climbs
    into a renamed folder (``$$TRITON_MODEL_DIRECTORY/../<step>/...``). ``configs`` is left as it was."""
    changed = {}
    for model, original in configs.items():
        config = original.message()  # the whole config, rewritten as Triton's message
        touched = model in renames
        if touched:
            config.name = renames[model]
        for step in config.ensemble_scheduling.step:
            if step.model_name in renames:
                step.model_name, touched = renames[step.model_name], True
        env = config.parameters.get("EXECUTION_ENV_PATH")
        if env is not None and env.string_value.startswith(f"{ENV_PREFIX}../"):
            head, _, rest = env.string_value[len(ENV_PREFIX) + 3:].partition("/")
            if head in renames:
                config.parameters["EXECUTION_ENV_PATH"].string_value = f"{ENV_PREFIX}../{renames[head]}/{rest}"
                touched = True
        if touched:
            changed[model] = config
    return changed


def config_text(config: model_config_pb2.ModelConfig) -> bytes:
    """A rewritten config as Triton's text format (``platform: "ensemble"`` literally, as SageMaker looks for)."""
    return text_format.MessageToString(config).encode()


def stamp_folder(folder: Path, renames: Mapping[str, str], configs: Mapping[str, ReadConfig]) -> None:
    """Apply ``renames`` ({step folder: new name}) to the archive unpacked at ``folder`` in place: configs
    rewritten (atomically) through :func:`restamp_configs`, then folders renamed. The manifest is not touched
    (the local endpoint stages archives this way; :func:`stamp_archive` writes a stamped archive)."""
    if not renames:
        return
    for old, new in renames.items():
        if (folder / new).exists():
            raise ArchiveError(f"cannot rename step {old!r} to {new!r}: the archive already holds a folder of "
                               "that name; rename that folder")
    for model, config in restamp_configs(configs, renames).items():
        with atomic_output(folder / model / "config.pbtxt") as fh:
            fh.write(config_text(config))
    for old, new in renames.items():
        os.rename(folder / old, folder / new)


@dataclass(frozen=True)
class Stamped:
    """One stamped archive: where it was written, its TargetModel and {original step: stamped step}."""

    archive: Path
    target_model: str
    steps: Mapping[str, str]
    source: Path
    manifest: bool  # False for a hand-made archive without conch's manifest (the originals are not recorded)


def plan_renames(configs: Mapping[str, ReadConfig], target_model: str,
                 previous: StampRecord | None) -> tuple[dict[str, str], dict[str, str]]:
    """({folder now: folder stamped}, {original step: stamped}) for stamping as ``target_model``; a stamped
    archive's steps are named from their originals (``previous``)."""
    originals = previous.originals if previous else {}
    renames: dict[str, str] = {}
    record: dict[str, str] = {}
    for step in step_models(configs):
        original = originals.get(step, step)
        new = stamped_name(original, target_model)
        record[original] = new
        if new != step:
            renames[step] = new
    return renames, record


class Unpacked:
    """An archive unpacked (through the safe extraction) and checked once, to be stamped under many names."""

    def __init__(self, archive: Path) -> None:
        self.archive = Path(archive)
        self._tmp = scratch_temp("conch-stamp-")
        self.folder = Path(self._tmp.name) / "archive"
        try:
            safe_extract(self.archive, self.folder)
            report = check_folder(self.folder, self.archive.name)
            if not report.ok:
                raise ArchiveError(f"{report.summary()}; fix it before stamping")
            self.manifest = _manifest(self.folder, self.archive)
            self.configs = report.configs  # as the check parsed them: each config is parsed once
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> Unpacked:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._tmp.cleanup()

    def stamp(self, target_model: str, out: Path) -> Stamped:
        """Write the archive stamped for ``target_model`` to ``out``/<target_model> (deterministic bytes, written
        atomically)."""
        target_model = target_model_of(target_model)
        renames, record = plan_renames(self.configs, target_model, self.manifest.stamp if self.manifest else None)
        for old, new in renames.items():
            if (self.folder / new).exists():
                raise ArchiveError(f"{self.archive.name}: cannot rename step {old!r} to {new!r}, the archive already "
                                   "holds a folder of that name; rename that folder and rebuild")
        files = _stamped_files(self.folder, renames, restamp_configs(self.configs, renames))
        if self.manifest is not None:
            files[MANIFEST_NAME] = dumps(stamped_manifest(self.manifest, target_model, record, renames, files))
        dest = Path(out) / target_model
        with atomic_output(dest) as fh:
            write_tar(files, fh)
        return Stamped(dest, target_model, record, self.archive, self.manifest is not None)


def stamp_archive(archive: Path, target_model: str, out: Path) -> Stamped:
    """Write ``archive`` stamped for ``target_model`` to ``out``/<target_model> (deterministic bytes, written
    atomically). The archive must pass `conch check`; ArchiveError saying why not."""
    return stamp_archives(archive, [target_model], out)[0]


def _manifest(folder: Path, archive: Path) -> Manifest | None:
    path = folder / MANIFEST_NAME
    return parse_manifest(path.read_bytes(), archive) if path.is_file() else None


def _stamped_files(folder: Path, renames: Mapping[str, str],
                   configs: Mapping[str, model_config_pb2.ModelConfig]) -> dict[str, FileSource]:
    """What the stamped archive holds: each top-level entry under its new name (folders as folders, so their
    inner links stay links), then the rewritten configs over the copies the folders bring."""
    files: dict[str, FileSource] = {}
    for entry in sorted(folder.iterdir()):
        name = renames.get(entry.name, entry.name)
        if entry.is_dir() and not entry.is_symlink() and not any(entry.iterdir()):
            files[f"{name}/"] = b""  # an empty folder is kept as one
        else:
            files[name] = entry
    for model, config in configs.items():
        files[f"{renames.get(model, model)}/config.pbtxt"] = config_text(config)
    return files


def _moved(path: str, renames: Mapping[str, str]) -> str:
    head, sep, rest = path.partition("/")
    return f"{renames.get(head, head)}{sep}{rest}"


def stamped_manifest(manifest: Manifest, target_model: str, record: Mapping[str, str], renames: Mapping[str, str],
                     files: Mapping[str, FileSource]) -> Manifest:
    """``manifest`` as the stamped archive's: steps, file digests, environments, warmup and shared memory under
    the new names, and the stamp (TargetModel and {original step: stamped step})."""
    digests = {}
    for path, digest in manifest.files.items():
        moved = _moved(path, renames)
        source = files.get(moved)
        digests[moved] = sha256(source) if isinstance(source, bytes) else digest
    steps = tuple(replace(s, model_name=renames.get(s.model_name, s.model_name)) for s in manifest.steps)
    environments = {_moved(k, renames): v for k, v in manifest.environments.items()}
    warmup = manifest.warmup and replace(
        manifest.warmup, steps={renames.get(k, k): v for k, v in manifest.warmup.steps.items()})
    shm = manifest.shm and replace(
        manifest.shm, steps={renames.get(k, k): v for k, v in manifest.shm.steps.items()},
        unknown=tuple(" ".join([renames.get(u.split(" ", 1)[0], u.split(" ", 1)[0]), *u.split(" ", 1)[1:]])
                      for u in manifest.shm.unknown))
    return replace(manifest, steps=steps, files=dict(sorted(digests.items())), environments=environments,
                   warmup=warmup, shm=shm, stamp=StampRecord(target_model, dict(sorted(record.items()))))


def stamp_archives(archive: Path, target_models: list[str], out: Path) -> list[Stamped]:
    """``archive`` stamped once per TargetModel into ``out``; names must differ."""
    names = [target_model_of(n) for n in target_models]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ArchiveError(f"TargetModel {', '.join(twice)} given twice; each name is one archive under the prefix")
    with Unpacked(archive) as unpacked:  # unpacked and checked once for every name
        return [unpacked.stamp(name, out) for name in names]
