"""What lets an unchanged rebuild do no work: file digests remembered by stat, sample expected outputs
cached by content key, and a record per archive of the key it was built from."""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from conch.archive.manifest import sha256
from conch.cache import RACY_NS, cache_dir, environment, key_of, own_code, read_json, stat_identity, write_json
from conch.ensembles.layout import FileSource
from conch.version import __version__

__all__ = ["BuildRecord", "Digests", "cached_expected", "digest", "entry_mode", "passed_before", "remember_passed"]


MEMO_LIMIT = 4096  # entries a per-process memo keeps before it starts over
_known: dict[tuple[str, int, int, int, int, int], str] = {}


def digest(source: FileSource) -> str:
    """sha256 of a file's content; for a file on disk, remembered under its ``stat_identity`` (path, size,
    inode, device, ns mtime and ctime: in this process and in the cache), so an unchanged 90 MB model is not
    read again. A file changed in the last two seconds is read every time (git's racily clean rule)."""
    if isinstance(source, bytes):
        return sha256(source)
    identity = stat_identity(source)
    if identity is None:
        return sha256(source)
    if identity in _known:
        return _known[identity]
    if identity[1] < _WORTH_REMEMBERING:
        value = sha256(source)
    else:
        where = _cache_root() / "digests" / key_of(list(identity))[:32]
        known = read_json(where)
        value = known if isinstance(known, str) else sha256(source)
        if known != value:
            write_json(where, value)
    if len(_known) >= MEMO_LIMIT:  # bounded: a notebook or a long harness starts over rather than grow
        _known.clear()
    _known[identity] = value
    return value


_WORTH_REMEMBERING = 1 << 20  # smaller files hash faster than their record is read


class Digests:
    """The content digests of one build: an in-memory file is hashed once although the same bytes go through
    the step's check record, the in-process run's key and the manifest (a file on disk is remembered by
    ``digest`` itself). Held for the build only: the memo keeps the bytes it names alive."""

    def __init__(self) -> None:
        self._held: dict[int, tuple[bytes, str]] = {}

    def __call__(self, source: FileSource) -> str:
        if not isinstance(source, bytes):
            return digest(source)
        held = self._held.get(id(source))
        if held is None or held[0] is not source:
            held = self._held[id(source)] = (source, digest(source))
        return held[1]


def entry_mode(name: str, source: FileSource) -> list[object]:
    """What an entry adds to the build key besides its content digest: executable bit or link target."""
    if isinstance(source, bytes):
        return [name]
    mode = os.lstat(source).st_mode
    if stat.S_ISLNK(mode):
        return [name, "link", os.readlink(source)]
    return [name, bool(mode & stat.S_IXUSR)]


def cached_expected(material: object, compute: Callable[[], dict[str, Any]], refresh: bool) -> dict[str, Any]:
    """Encoded expected outputs of a sample declared ``cache=True``: from the cache under ``material``'s key
    (which holds the function's ``pure_key``), else computed."""
    where = _cache_root() / "samples" / f"{key_of([__version__, own_code(), material])[:32]}.json"
    if not refresh:
        known = read_json(where)
        if isinstance(known, dict):
            return known
    value = compute()
    write_json(where, value)
    return value


def passed_before(material: object) -> bool:
    """Whether a step's checks with exactly these inputs passed before (see remember_passed)."""
    return os.path.isfile(_check_record(material))


def remember_passed(material: object) -> None:
    """Note that a step's checks passed for ``material``: the step's declaration and the content of every
    file it lays out. The checks are conch's code run on those files through the libraries installed
    (onnx, torch, DALI): the record's key adds conch's code and the installed distributions."""
    write_json(_check_record(material), True)


def _check_record(material: object) -> Path:
    return _cache_root() / "checks" / f"{key_of([__version__, own_code(), environment(), material])[:32]}.json"


_roots: dict[tuple[str | None, str], Path] = {}


def _cache_root() -> Path:
    """``cache_dir()``, asked once per setting in a process (it makes the folder at each call; the records
    written under it make their folders themselves)."""
    folder = os.environ.get("CONCH_CACHE_DIR")
    # what cache_dir() follows: the setting (a relative one from the working folder), else the home folder
    setting = (folder, os.getcwd() if folder and not os.path.isabs(folder) else os.environ.get("HOME", ""))
    root = _roots.get(setting)
    if root is None:
        root = _roots[setting] = cache_dir()
    return root


_real_folders: dict[str, str] = {}


def _real_path(archive: Path) -> str:
    """``str(archive.resolve())``, with the folder's resolved once per process (a build of 200 archives into
    one folder resolved it 200 times, a stat per part of the path each time)."""
    if os.path.islink(archive):
        return str(archive.resolve())
    folder = os.path.abspath(archive.parent)
    real = _real_folders.get(folder)
    if real is None:
        if len(_real_folders) >= MEMO_LIMIT:
            _real_folders.clear()
        real = _real_folders[folder] = str(Path(folder).resolve())
    return os.path.join(real, archive.name)


class BuildRecord:
    """The key an archive was built from and the archive's stat then (size, inode, device, ns mtime and
    ctime): if both still hold, the archive on disk is the one this build would write. A record saved within
    two seconds of the archive's last change also holds its sha256 (a write in the same clock tick would keep
    its stat: git's racily clean entries); the first match reads the archive once against it and saves the
    record again without it."""

    def __init__(self, archive: Path) -> None:
        self.archive = archive
        self.where = _cache_root() / "builds" / f"{key_of(_real_path(archive))[:32]}.json"

    def _stat(self) -> tuple[list[int], bool] | None:
        """The archive's stat, and whether it changed too recently to be told by it."""
        try:
            st = self.archive.stat()
        except OSError:
            return None
        changed = max(st.st_mtime_ns, st.st_ctime_ns)
        return [st.st_size, st.st_ino, st.st_dev, st.st_mtime_ns, st.st_ctime_ns], time.time_ns() - changed < RACY_NS

    def matches(self, key: str) -> bool:
        current = self._stat()  # first: a new --out has no archive, and then no record is worth reading
        if current is None:
            return False
        record = read_json(self.where)
        if not isinstance(record, dict) or record.get("key") != key or record.get("stat") != current[0]:
            return False
        if record.get("sha256") is None:
            return True
        if sha256(self.archive) != record["sha256"]:
            return False
        self.save(key)
        return True

    def save(self, key: str) -> None:
        current = self._stat()
        if current is None:
            return
        stat, racy = current
        write_json(self.where, {"key": key, "stat": stat, "sha256": sha256(self.archive) if racy else None})
