"""The Python backend's shared-memory regions in /dev/shm, named so that conch can remove what a killed
server leaves behind.

Each stub keeps its tensors in a 16 MiB region (more as it grows). A server that exits normally removes
them; one killed by SIGKILL — or killed with conch, which the kernel does when conch itself is killed —
leaves every region in /dev/shm, which is memory: hundreds of leaked regions fill the machine. conch names
each server's regions ``conch_<pid of the conch process>_<token>_…`` (the backend's
``shm-region-prefix-name``), removes them when it stops the server, and at every start removes the regions
of conch processes that are gone.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
from collections.abc import Iterable
from pathlib import Path

from conch.scratch import alive

SHM_DIR = Path("/dev/shm")
_OURS = re.compile(r"^conch_(\d+)_[0-9a-f]+_")


def new_prefix() -> str:
    """A region-name prefix for one server started by this process."""
    return f"conch_{os.getpid()}_{secrets.token_hex(4)}_"


def remove(prefix: str) -> int:
    """Remove the regions whose names start with ``prefix``; how many were removed."""
    return _unlink(p for p in _listing() if p.name.startswith(prefix))


def sweep_orphans() -> int:
    """Remove the regions of conch processes that no longer run; how many were removed."""
    def orphaned(path: Path) -> bool:
        match = _OURS.match(path.name)
        return match is not None and not alive(int(match.group(1)))

    return _unlink(p for p in _listing() if orphaned(p))


def _listing() -> list[Path]:
    try:
        return list(SHM_DIR.iterdir())
    except OSError:  # no /dev/shm: nothing to clean
        return []


def _unlink(paths: Iterable[Path]) -> int:
    removed = 0
    for path in paths:
        with contextlib.suppress(OSError):
            path.unlink()
            removed += 1
    return removed
