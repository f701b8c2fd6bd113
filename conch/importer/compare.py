"""The proof of an import: the declaration's production build holds every config of the source as the
same ModelConfig message and every file byte for byte; whatever differs is named."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conch.archive.manifest import MANIFEST_NAME, sha256
from conch.compiler.config_reader import config_field
from conch.compiler.pbtxt import parse_config
from conch.ensembles.layout import FileSource
from conch.importer.repository import ModelFolder, Repository


def compare(repo: Repository, ensemble: ModelFolder, built: dict[str, FileSource]) -> tuple[list[str], int, int]:
    """``(messages, configs equal, files identical)`` of a built repository (path -> content) against the
    source's models of ``ensemble``."""
    messages: list[str] = []
    configs = files = 0
    models = [ensemble.name, *(s.model_name for s in ensemble.read.spec.ensemble_steps)]
    for name in models:
        model = repo.models.get(name)
        if model is None or model.declared:
            continue
        for path in sorted(p for p in model.folder.rglob("*") if p.is_file()):
            rel = f"{name}/{path.relative_to(model.folder).as_posix()}"
            if rel not in built:
                messages.append(f"{rel}: not in the rebuilt archive")
            elif rel.endswith("/config.pbtxt"):
                source = built[rel]
                rebuilt: Any = parse_config(source if isinstance(source, bytes) else Path(source).read_bytes(), rel)
                if rebuilt == model.config:
                    configs += 1
                else:
                    messages.append(f"{rel}: the rebuilt config differs: {_difference(model.config, rebuilt)}")
            elif sha256(built[rel]) != sha256(path):
                messages.append(f"{rel}: the rebuilt file differs from the original")
            else:
                files += 1
    for entry in repo.beside:
        if entry == MANIFEST_NAME:  # the rebuilt archive has a manifest of its own
            continue
        top = repo.root / entry
        for path in sorted(p for p in top.rglob("*") if p.is_file()) if top.is_dir() else [top]:
            rel = path.relative_to(repo.root).as_posix()
            if rel not in built:
                messages.append(f"{rel}: not in the rebuilt archive (beside the model folders)")
            elif sha256(built[rel]) == sha256(path):
                files += 1
            else:
                messages.append(f"{rel}: the rebuilt file differs from the original")
    return messages, configs, files


def _difference(original: Any, rebuilt: Any) -> str:
    names = sorted({f.name for f, _ in original.ListFields()} | {f.name for f, _ in rebuilt.ListFields()})
    differ = [n for n in names if _part(original, n) != _part(rebuilt, n)]
    return f"field(s) {', '.join(differ)}"


def _part(config: Any, name: str) -> str:
    from google.protobuf import text_format

    return text_format.MessageToString(config_field(config, name))
