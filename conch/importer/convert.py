"""`conch import`: existing model repositories and MME archives in, Python declarations out, each proven
by building it in memory and comparing with the source (every config as a ModelConfig, every file)."""

from __future__ import annotations

import contextlib
import importlib.util
import shutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from conch.atomic_write import write_bytes_atomic
from conch.builder.repository_build import render_repository
from conch.cache import drop_racy_bytecode
from conch.ensembles.dtypes import DType
from conch.ensembles.ensemble import Ensemble
from conch.ensembles.layout import Platform
from conch.ensembles.target import DEFAULT_RELEASE
from conch.errors import BuildError, ConchError
from conch.importer.compare import compare
from conch.importer.declaration import declare, module_name
from conch.importer.generated_samples import SAMPLE_NAME, capture, generated_inputs, record, write_samples
from conch.importer.repository import ModelFolder, Repository, archive_stem, open_source


@dataclass
class Imported:
    """One ensemble written as a module: what it could not say, and what its rebuild proved."""

    ensemble: str
    module: Path
    messages: list[str] = field(default_factory=list)
    configs_equal: int = 0
    files_identical: int = 0
    sample: str = ""  # where the module's sample comes from, or why it has none


def import_sources(
    sources: Sequence[Path],
    out: Path,
    *,
    copy_files: bool = False,
    strict: bool = False,
    samples: bool = True,
    say: Callable[[str], None] | None = None,
) -> list[Imported]:
    """Write one module per ensemble of every source. ``out``: a .py file (one ensemble in all) or a folder.
    Archives are unpacked beside the modules; with ``copy_files`` a folder source is copied there too, so
    the modules do not depend on it. With ``strict`` any message is an error and no module is kept."""
    out = Path(out)
    folder = out.parent if out.suffix == ".py" else out
    folder.mkdir(parents=True, exist_ok=True)
    repos = [_repository(Path(s), folder, copy_files) for s in sources]
    ensembles = [(repo, e) for repo in repos for e in repo.ensembles]
    if out.suffix == ".py" and len(ensembles) != 1:
        raise BuildError(f"{out}: the sources hold {len(ensembles)} ensembles; give --out a folder to write one "
                         "module per ensemble")
    targets = [out if out.suffix == ".py" else folder / module_name(e.name) for _, e in ensembles]
    twice = sorted({t.name for t in targets if targets.count(t) > 1})
    if twice:
        raise BuildError(f"the sources hold more than one ensemble written as {', '.join(twice)}; import them "
                         "into different --out folders")
    kept = [p for t in targets for p in (t, t.with_suffix(".samples.json")) if p.exists()]
    if kept:
        _remove_made(repos)
        raise BuildError(f"{kept[0]} exists already (a module of yours, or an earlier import); conch import does not "
                         "replace it: remove it or give another --out")
    done: list[Imported] = []
    for (repo, ensemble), target in zip(ensembles, targets, strict=True):
        if say:
            say(f"importing ensemble {ensemble.name!r} from {repo.source} into {target}")
        done.append(_import_one(repo, ensemble, target, samples))
    for repo in repos:  # models no ensemble runs are not imported: say so once, with the repository's first
        used = {s.model_name for e in repo.ensembles for s in e.read.spec.ensemble_steps} | {
            e.name for e in repo.ensembles}
        first = next(i for (r, _), i in zip(ensembles, done, strict=True) if r is repo)
        first.messages.extend(f"{name}/config.pbtxt: not imported: no ensemble of {repo.source.name} runs it"
                              for name in sorted(set(repo.models) - used))
    if strict and any(i.messages for i in done):
        for i in done:  # the module, its samples, and the bytecode its check import wrote
            cached = Path(importlib.util.cache_from_source(str(i.module)))
            for path in (i.module, i.module.with_suffix(".samples.json"), cached):
                path.unlink(missing_ok=True)
            with contextlib.suppress(OSError):  # __pycache__ only when nothing else is in it
                cached.parent.rmdir()
        _remove_made(repos)
        listed = "; ".join(m for i in done for m in i.messages)
        raise BuildError(f"--strict: the import cannot say everything the sources hold: {listed}")
    return done


def _remove_made(repos: list[Repository]) -> None:
    for repo in repos:  # unpacked archives and copied folders: this import made them
        if repo.root.resolve() != repo.source.resolve():
            shutil.rmtree(repo.root, ignore_errors=True)


def _repository(source: Path, folder: Path, copy_files: bool) -> Repository:
    if source.is_dir() and copy_files:
        copy = folder / source.resolve().name
        if copy.exists():
            raise BuildError(f"{source}: {copy} exists already; remove it or give another --out")
        shutil.copytree(source, copy, symlinks=False)
        repo = open_source(copy, folder)
        repo.source = source
        return repo
    return open_source(source, folder)


def _import_one(repo: Repository, ensemble: ModelFolder, target: Path, samples: bool) -> Imported:
    messages = [m for m in repo.messages if _concerns(m, repo, ensemble)]
    samples_file = target.with_suffix(".samples.json")
    decl = declare(repo, ensemble, target, None)
    write_bytes_atomic(target, decl.text.encode())
    imported = Imported(ensemble.name, target, [*messages, *decl.messages])
    try:
        declared = _load(target, ensemble.name)
        built = render_repository(declared, "production", DEFAULT_RELEASE).files
    except ConchError as exc:
        if not imported.messages:  # nothing explains it: the source is inconsistent, or a case not handled
            exc.within(f"{target.name}, imported from {repo.source}")
            raise
        imported.messages.append(f"{target.name}: does not build, for the reasons above ({exc})")
        return imported
    found, imported.configs_equal, imported.files_identical = compare(repo, ensemble, dict(built))
    imported.messages.extend(m for m in found if m not in imported.messages)
    if samples:
        imported.sample = _sample(repo, declared, samples_file)
        if samples_file.exists():
            kept = repo.manifest is not None and bool(repo.manifest.samples)
            decl = declare(repo, ensemble, target, samples_file.name, captured=not kept)
            write_bytes_atomic(target, decl.text.encode())
    return imported


def _concerns(message: str, repo: Repository, ensemble: ModelFolder) -> bool:
    models = {ensemble.name, *(s.model_name for s in ensemble.read.spec.ensemble_steps)}
    return message.split("/", 1)[0] in models or message.startswith(str(repo.source))


def _load(path: Path, name: str) -> Ensemble:
    """Import a written module under a private name (a second import of the same file name elsewhere must
    not find this one) and return its ensemble."""
    module_id = f"conch_imported_{abs(hash(str(path.resolve())))}"
    drop_racy_bytecode([path])  # a module conch writes, imported within the second
    spec = importlib.util.spec_from_file_location(module_id, path)
    if spec is None or spec.loader is None:
        raise BuildError(f"{path}: cannot be imported")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_id] = module
    try:
        spec.loader.exec_module(module)
    except ConchError as exc:
        exc.within(f"{path.name} (written by conch import: a conch bug, or a case it does not handle)")
        raise
    finally:
        sys.modules.pop(module_id, None)
    found = [v for v in vars(module).values() if isinstance(v, Ensemble) and v.name == name]
    if not found:
        raise BuildError(f"{path}: declares no ensemble {name!r}")
    return found[0]


def _sample(repo: Repository, ensemble: Ensemble, path: Path) -> str:
    """Write the module's sample file; say where its sample comes from, or why there is none."""
    dtypes = {t.name: t.dtype for t in (*ensemble.input_specs(), *ensemble.output_specs())}
    if repo.manifest is not None and repo.manifest.samples:
        write_samples(path, list(repo.manifest.samples), "the samples of the archive's manifest")
        return f"{len(repo.manifest.samples)} sample(s) from the archive's manifest"
    inputs = generated_inputs(ensemble.input_specs(), ensemble.max_batch_size > 0, _encoded_images(ensemble))
    sequenced = [c.step.name for c in ensemble.calls if "sequence_batching" in c.step.settings.config_fields.names]
    try:
        outputs = capture(ensemble, inputs, sequence=bool(sequenced))
    except ConchError as exc:
        return f"no sample: running generated inputs on the local tritonserver failed: {exc}"
    write_samples(path, [record(SAMPLE_NAME, inputs, outputs, dtypes)],
                  "generated inputs and the outputs the models gave on the local tritonserver: replace them")
    said = f"captured on the local tritonserver from generated inputs ({path.name})"
    if sequenced:
        said += f"; sent as a sequence of one for the sequence batcher of {', '.join(sequenced)}"
    return said


def _encoded_images(ensemble: Ensemble) -> set[str]:
    """UINT8 [-1] ensemble inputs fed to a DALI step: encoded images, for which a JPEG is generated."""
    found: set[str] = set()
    for call in ensemble.calls:
        if call.step.platform is not Platform.DALI:
            continue
        for handle in call.inputs.values():
            if handle.producer is None and handle.dtype is DType.UINT8 and handle.dims[-1:] == (-1,):
                found.add(handle.name)
    return found


def describe(imported: Imported) -> dict[str, Any]:
    """The import of one ensemble, for `--json`."""
    return {**asdict(imported), "module": str(imported.module)}


__all__ = ["Imported", "archive_stem", "describe", "import_sources"]
