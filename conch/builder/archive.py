"""Deterministic .tar.gz archives written atomically: the same files give the same bytes."""

from __future__ import annotations

import io
import os
import stat
import tarfile
from collections.abc import Mapping
from pathlib import Path
from typing import BinaryIO

from isal import igzip

from conch.ensembles.layout import FileSource
from conch.errors import BuildError

# 2000-01-01T00:00:00Z: a fixed mtime for every entry (0 upsets some extractors).
FIXED_MTIME = 946684800


def expand(files: Mapping[str, FileSource], _within: tuple[Path, ...] = ()) -> dict[str, FileSource]:
    """Replace directory sources by the files under them, keyed by their path in the archive.

    A symlink is archived as its content (the build machine's paths stay out of the archive), except a
    relative link inside a folder source that stays inside it, which remains a link."""
    out: dict[str, FileSource] = {}
    for rel, source in files.items():
        if isinstance(source, Path) and source.is_symlink():
            source = source.resolve()
        if isinstance(source, Path) and source.is_dir():
            if source in _within:
                raise BuildError(f"{rel}: its symlinks loop back to {source}; replace the link by the files")
            prefix = "" if rel in ("", ".") else rel.rstrip("/") + "/"
            for path in sorted(source.rglob("*")):
                name = f"{prefix}{path.relative_to(source).as_posix()}"
                if path.is_symlink() and not _link_inside(path, source):
                    out.update(expand({name: path}, (*_within, source)))
                elif path.is_file() or path.is_symlink():
                    out[name] = path
                elif path.is_dir() and not any(path.iterdir()):
                    out[f"{name}/"] = b""
        else:
            out[rel] = source
    return out


def _link_inside(link: Path, root: Path) -> bool:
    target = os.readlink(link)
    landing = os.path.normpath(os.path.join(os.path.dirname(link), target))
    return not os.path.isabs(target) and Path(landing).is_relative_to(root) and Path(landing).resolve().is_relative_to(
        root.resolve())


def _dirs_of(paths: list[str]) -> set[str]:
    dirs: set[str] = set()
    for p in paths:
        parts = p.rstrip("/").split("/")
        for i in range(1, len(parts)):
            dirs.add("/".join(parts[:i]))
        if p.endswith("/"):
            dirs.add(p.rstrip("/"))
    return dirs


# ISA-L's default level (of 0-3): on text_embeddings' 114 MB, 1.2 s and 111.2 MB where zlib's level 6 took
# 13.7 s for 111.1 MB (benchmarks/RESULTS.md, "Issue 31: the plain archive writer").
COMPRESS = 2
_COPY = 1 << 20  # tarfile copies a file's content in pieces of this size


def member(name: str, kind: bytes, mode: int, size: int = 0, linkname: str = "") -> tarfile.TarInfo:
    """A normalised entry: owned by root with no owner names, at the fixed mtime, with one of three modes."""
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.size = size
    info.linkname = linkname
    info.mtime = FIXED_MTIME
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def write_tar(files: Mapping[str, FileSource], fileobj: BinaryIO) -> None:
    """Write a deterministic gzip'd tar of ``files`` (path in archive -> bytes or file on disk).

    The tar is tarfile's GNU format (the format conch archives always had: ``././@LongLink`` entries for
    names past 100 bytes, which GNU tar, busybox and Python read), folders first, then entries by name,
    each normalised by ``member``. The gzip stream is python-isal's ``igzip`` (ISA-L's deflate, an
    ordinary gzip member) with no file name and mtime 0, so the bytes depend only on the entries and the
    isal release (docs/changelog.md)."""
    entries = expand(files)
    names = sorted(entries)
    with igzip.GzipFile(filename="", mode="wb", fileobj=fileobj, compresslevel=COMPRESS, mtime=0) as gz, \
            tarfile.TarFile(fileobj=gz, mode="w", format=tarfile.GNU_FORMAT, copybufsize=_COPY) as tar:
        for d in sorted(_dirs_of(names)):
            tar.addfile(member(d + "/", tarfile.DIRTYPE, 0o755))
        for name in names:
            if name.endswith("/"):
                continue
            source = entries[name]
            if isinstance(source, bytes):
                tar.addfile(member(name, tarfile.REGTYPE, 0o644, len(source)), io.BytesIO(source))
                continue
            try:
                st = os.lstat(source)
            except OSError:
                st = None
            if st is not None and stat.S_ISLNK(st.st_mode):
                tar.addfile(member(name, tarfile.SYMTYPE, 0o777, linkname=os.readlink(source)))
                continue
            if st is None or not stat.S_ISREG(st.st_mode):
                raise BuildError(f"file {source} (for {name}) does not exist")
            mode = 0o755 if st.st_mode & stat.S_IXUSR else 0o644
            add_file(tar, member(name, tarfile.REGTYPE, mode, st.st_size), Path(source))


def add_file(tar: tarfile.TarFile, info: tarfile.TarInfo, path: Path) -> None:
    """Add ``info.size`` bytes of ``path``; a file cut short since it was measured is a clear error."""
    with path.open("rb") as fh:
        try:
            tar.addfile(info, fh)
        except OSError:
            if os.fstat(fh.fileno()).st_size < info.size:
                raise BuildError(f"file {path} shrank while it was archived; build again") from None
            raise
