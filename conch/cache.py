"""conch's cache folder: exported models, backend folders and packed environments, reused across runs."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


def cache_dir() -> Path:
    """``$CONCH_CACHE_DIR``, or ``~/.cache/conch``, as an absolute path."""
    root = os.environ.get("CONCH_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "conch")
    path = Path(root).absolute()  # a relative setting means the folder it names now, not where a child runs
    path.mkdir(parents=True, exist_ok=True)
    return path


def cached_file(kind: str, key: str, filename: str, produce: Callable[[Path], None]) -> Path:
    """``<cache>/<kind>/<key>/<filename>``, produced once by ``produce(path)`` and published atomically."""
    final = cache_dir() / kind / key
    path = final / filename
    if path.is_file():
        return path
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=final.parent))
    try:
        produce(tmp / filename)
        if not (tmp / filename).is_file():
            raise FileNotFoundError(f"producing {kind}/{key} wrote no {filename}")
        with contextlib.suppress(OSError):  # published meanwhile by another process
            os.replace(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def remembered(kind: str, material: object, compute: Callable[[], Any]) -> Any:
    """A JSON value computed once for ``material`` (what it depends on, JSON-able) and kept under
    ``<cache>/<kind>/``: an unchanged rebuild reads it instead of importing the framework that computes it.
    A failure is not remembered; a lost race between processes only repeats the work."""
    key = hashlib.sha256(json.dumps(material, sort_keys=True, default=str).encode()).hexdigest()[:32]
    where = cache_dir() / kind / f"{key}.json"
    try:
        return json.loads(where.read_text())
    except (OSError, ValueError):
        pass
    value = compute()
    where.parent.mkdir(parents=True, exist_ok=True)
    tmp = where.with_name(f".{where.name}.{os.getpid()}")
    tmp.write_text(json.dumps(value, sort_keys=True))
    os.replace(tmp, where)
    return value
