"""The manifest conch writes at the archive root, where Triton and SageMaker ignore it."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from conch.ensembles.step import FileSource

MANIFEST_NAME = "conch-manifest.json"
FORMAT = 1


def sha256(source: FileSource) -> str:
    h = hashlib.sha256()
    if isinstance(source, bytes):
        h.update(source)
    else:
        with Path(source).open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def dumps(manifest: Mapping[str, Any]) -> bytes:
    """Stable JSON: sorted keys, no timestamps, trailing newline."""
    return (json.dumps(manifest, sort_keys=True, indent=1) + "\n").encode()


def read_manifest(repo: Path) -> dict[str, Any]:
    path = repo / MANIFEST_NAME
    data: dict[str, Any] = json.loads(path.read_text())
    return data
