"""The one atomic file writer: a temp file beside the target, renamed over it only when the write succeeded,
so a reader sees the old file or the new one whole, never a half (archives, reports, recordings, declarations)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from conch.scratch import alive


@contextmanager
def atomic_output(path: Path, mode: int = 0o644) -> Iterator[BinaryIO]:
    """Yield a temp file beside ``path``; rename it over ``path``, with ``mode``, only if the block succeeds.

    No fsync: the rename makes the new file visible whole or not at all to every reader; only a power
    loss right after a build could leave it empty, and a rebuild repairs that (the build record no
    longer matches the archive)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    sweep_parts(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".part", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def sweep_parts(path: Path) -> list[Path]:
    """Remove ``path``'s temp files (``.<name>.<pid>.<random>.part``) left by writers that were killed (their
    pid is gone)."""
    removed = []
    with os.scandir(path.parent) as entries:
        parts = [e.name for e in entries if e.name.startswith(".") and e.name.endswith(".part")
                 and e.name[1:].rsplit(".", 3)[0] == path.name]
    for name in parts:
        pid = name[len(path.name) + 2:].split(".", 1)[0]
        if pid.isdigit() and not alive(int(pid)):
            (path.parent / name).unlink(missing_ok=True)
            removed.append(path.parent / name)
    return removed


def write_bytes_atomic(path: Path, data: bytes, mode: int = 0o644) -> None:
    with atomic_output(path, mode) as fh:
        fh.write(data)
