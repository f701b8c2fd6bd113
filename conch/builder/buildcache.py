"""What lets an unchanged rebuild do no work: file digests remembered by stat, sample expected outputs
cached by content key, and a record per archive of the key it was built from."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from conch.archive.manifest import sha256
from conch.cache import cache_dir, key_of, read_json, write_json
from conch.ensembles.layout import FileSource
from conch.version import __version__

__all__ = ["BuildRecord", "cached_expected", "digest", "entry_mode", "passed_before", "remember_passed"]


_known: dict[tuple[str, int, int, int], str] = {}


def digest(source: FileSource) -> str:
    """sha256 of a file's content; for a file on disk, remembered under its path, size, mtime and inode
    (in this process and in the cache), so an unchanged 90 MB model is not read again."""
    if isinstance(source, bytes):
        return sha256(source)
    st = source.stat()
    identity = (os.path.abspath(source), st.st_size, st.st_mtime_ns, st.st_ino)
    if identity in _known:
        return _known[identity]
    if st.st_size < _WORTH_REMEMBERING:
        value = sha256(source)
    else:
        where = cache_dir() / "digests" / key_of(list(identity))[:32]
        known = read_json(where)
        value = known if isinstance(known, str) else sha256(source)
        if known != value:
            write_json(where, value)
    _known[identity] = value
    return value


_WORTH_REMEMBERING = 1 << 20  # smaller files hash faster than their record is read


def entry_mode(name: str, source: FileSource) -> list[object]:
    """What an entry adds to the build key besides its content digest: executable bit or link target."""
    if isinstance(source, bytes):
        return [name]
    if source.is_symlink():
        return [name, "link", os.readlink(source)]
    return [name, bool(source.stat().st_mode & stat.S_IXUSR)]


def cached_expected(material: object, compute: Callable[[], dict[str, Any]], refresh: bool) -> dict[str, Any]:
    """Encoded expected outputs of a sample: from the cache under ``material``'s key, else computed."""
    where = cache_dir() / "samples" / f"{key_of([__version__, material])[:32]}.json"
    if not refresh:
        known = read_json(where)
        if isinstance(known, dict):
            return known
    value = compute()
    write_json(where, value)
    return value


def passed_before(material: object) -> bool:
    """Whether checks with exactly these inputs passed before (see remember_passed)."""
    return (cache_dir() / "checks" / f"{key_of([__version__, material])[:32]}.json").is_file()


def remember_passed(material: object) -> None:
    write_json(cache_dir() / "checks" / f"{key_of([__version__, material])[:32]}.json", True)


class BuildRecord:
    """The key an archive was built from, and its size, mtime and inode then: if both still hold, the
    archive on disk is the one this build would write."""

    def __init__(self, archive: Path) -> None:
        self.archive = archive
        self.where = cache_dir() / "builds" / f"{key_of(str(archive.resolve()))[:32]}.json"

    def _stat(self) -> list[int] | None:
        try:
            st = self.archive.stat()
        except OSError:
            return None
        return [st.st_size, st.st_mtime_ns, st.st_ino]

    def matches(self, key: str) -> bool:
        current = self._stat()  # first: a new --out has no archive, and then no record is worth reading
        return current is not None and read_json(self.where) == {"key": key, "stat": current}

    def save(self, key: str) -> None:
        write_json(self.where, {"key": key, "stat": self._stat()})
