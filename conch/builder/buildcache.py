"""What lets an unchanged rebuild do no work: file digests remembered by stat, sample expected outputs
cached by content key, and a record per archive of the key it was built from."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

from conch.archive.manifest import sha256
from conch.cache import RACY_NS, cache_dir, key_of, read_json, stat_identity, write_json
from conch.ensembles.layout import FileSource

__all__ = ["BuildRecord", "Digests", "digest", "entry_mode"]


def digest(source: FileSource) -> str:
    """sha256 of a file's content; for a file on disk of a MiB or more, remembered in the cache under its
    ``stat_identity`` (path, size, inode, device, ns mtime and ctime), so an unchanged 90 MB model is not read
    again. A file changed in the last two seconds is read every time (git's racily clean rule)."""
    identity = None if isinstance(source, bytes) else stat_identity(source)
    if identity is None or identity[1] < _WORTH_REMEMBERING:
        return sha256(source)
    where = cache_dir() / "digests" / key_of(list(identity))[:32]
    known = read_json(where)
    if isinstance(known, str):
        return known
    value = sha256(source)
    write_json(where, value)
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


class BuildRecord:
    """The key an archive was built from and the archive's stat then (size, inode, device, ns mtime and
    ctime): if both still hold, the archive on disk is the one this build would write. A record saved within
    two seconds of the archive's last change also holds its sha256 (a write in the same clock tick would keep
    its stat: git's racily clean entries); the first match reads the archive once against it and saves the
    record again without it."""

    def __init__(self, archive: Path) -> None:
        self.archive = archive
        self.where = cache_dir() / "builds" / f"{key_of(str(archive.resolve()))[:32]}.json"

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
