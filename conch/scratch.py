"""Temp folders a later run can find: each process works under ``<cache>/scratch/<pid>``, and the first use
in a process removes the folders of processes that no longer run (a SIGKILLed build or replay)."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

from conch.cache import cache_dir

_mine: Path | None = None


PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """In a child (before exec, or a forked worker's first act): SIGKILL when the thread that started it ends,
    however it ends, SIGKILL included (Linux prctl)."""
    import ctypes
    import signal

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def alive(pid: int) -> bool:
    """Whether a process of that id runs (a reused id reads as alive: its folder waits for a later sweep)."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # OverflowError: a number no process id can be (a stray name)
        return False
    except PermissionError:
        return True
    return True


def sweep(root: Path) -> list[Path]:
    """Remove the scratch folders of dead processes (and a stale one under this process's id)."""
    removed = []
    for folder in root.iterdir() if root.is_dir() else ():
        pid = int(folder.name) if folder.name.isdigit() else None
        if pid is not None and (pid == os.getpid() or not alive(pid)):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def scratch_dir() -> Path:
    """This process's scratch folder (created, and the dead ones swept, on first use; removed at exit)."""
    global _mine
    if _mine is None or not _mine.is_dir():
        root = cache_dir() / "scratch"
        root.mkdir(parents=True, exist_ok=True)
        sweep(root)
        _mine = root / str(os.getpid())
        _mine.mkdir()
        atexit.register(shutil.rmtree, _mine, True)
    return _mine


def scratch_temp(prefix: str) -> tempfile.TemporaryDirectory[str]:
    """A ``TemporaryDirectory`` inside this process's scratch folder."""
    return tempfile.TemporaryDirectory(prefix=prefix, dir=scratch_dir())
