"""Deterministic .tar.gz archives written atomically: the same files give the same bytes."""

from __future__ import annotations

import os
import stat
import tarfile
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from conch.builder.deflate import COMPRESS, SegmentedGzip, level_for
from conch.ensembles.layout import FileSource
from conch.errors import BuildError
from conch.scratch import alive

# 2000-01-01T00:00:00Z: a fixed mtime for every entry (0 upsets some extractors).
FIXED_MTIME = 946684800


def expand(files: Mapping[str, FileSource], _within: tuple[Path, ...] = ()) -> dict[str, FileSource]:
    """Replace directory sources by the files under them, keyed by their path in the archive.

    A symlink is archived as its content (the build machine's paths stay out of the archive), except a
    relative link inside a folder source that stays inside it, which remains a link."""
    out: dict[str, FileSource] = {}
    for rel, source in files.items():
        folder = False
        if isinstance(source, Path):  # one stat for a plain file: a build expands every file it lays out thrice
            mode = _mode(source)
            if stat.S_ISLNK(mode):
                source = source.resolve()
                folder = source.is_dir()
            else:
                folder = stat.S_ISDIR(mode)
        if isinstance(source, Path) and folder:
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


def _mode(path: Path) -> int:
    """The mode of ``path`` itself (a link's, not its target's); 0 when there is nothing there."""
    try:
        return os.lstat(path).st_mode
    except OSError:
        return 0


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


def _info(name: str, kind: bytes, mode: int, size: int = 0) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.size = size
    info.mtime = FIXED_MTIME
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


# The parts of a GNU tar header that are the same for every entry conch writes: uid and gid 0, the fixed
# mtime, GNU's magic, no owner names, no device numbers, no prefix, and the padding to 512 bytes.
_IDS = b"0000000\0" * 2
_MTIME = b"%011o\0" % FIXED_MTIME
_REST = tarfile.GNU_MAGIC + tarfile.NUL * (32 + 32 + 8 + 8 + 155 + 12)
_FIXED_SUM = 8 * ord(" ") + sum(_IDS) + sum(_MTIME) + sum(_REST)  # the checksum counts its own field as spaces
_NAME = 100
_MAX_SIZE = 8 ** 11  # 8 GiB: larger sizes take GNU's base-256 form


def header(name: str, kind: bytes, mode: int, size: int = 0, linkname: str = "") -> bytes:
    """The 512-byte header tarfile writes for this entry in GNU format (``_info(...).tobuf(GNU_FORMAT)``),
    built directly: a build writes ~14 per small ensemble, and tarfile's general path was a fifth of
    writing the archive. A name or link past 100 bytes, or a size past 8 GiB, goes through tarfile."""
    if kind == tarfile.DIRTYPE and not name.endswith("/"):
        name += "/"  # as tarfile names a folder
    raw = name.encode(tarfile.ENCODING, "surrogateescape")
    link = linkname.encode(tarfile.ENCODING, "surrogateescape")
    if len(raw) > _NAME or len(link) > _NAME or not 0 <= size < _MAX_SIZE:
        info = _info(name, kind, mode, size)
        info.linkname = linkname
        return info.tobuf(tarfile.GNU_FORMAT, tarfile.ENCODING, "surrogateescape")
    modes = b"%07o\0" % (mode & 0o7777)
    sizes = b"%011o\0" % size
    chksum = _FIXED_SUM + sum(raw) + sum(modes) + sum(sizes) + kind[0] + sum(link)
    return b"".join((raw, tarfile.NUL * (_NAME - len(raw)), modes, _IDS, sizes, _MTIME, b"%06o\0 " % chksum,
                     kind, link, tarfile.NUL * (_NAME - len(link)), _REST))


def write_tar(files: Mapping[str, FileSource], fileobj: BinaryIO) -> None:
    """Write a deterministic gzip'd tar of ``files`` (path in archive -> bytes or file on disk).

    Each file is deflated at a level chosen from its content (deflate.level_for): already compressed
    content is stored instead of being compressed a second time. The bytes are those of tarfile's GNU
    format; headers, small files and padding are gathered and deflated in pieces of about 1 MiB (small
    archives: one call of zlib), large files stream through in 1 MiB reads."""
    entries = expand(files)
    names = sorted(entries)
    gz = SegmentedGzip(fileobj)
    out = _Gathered(gz)
    for d in sorted(_dirs_of(names)):
        out.entry(header(d + "/", tarfile.DIRTYPE, 0o755))
    for name in names:
        if name.endswith("/"):
            continue
        source = entries[name]
        if isinstance(source, bytes):
            out.level(level_for(source, len(source)))
            out.entry(header(name, tarfile.REGTYPE, 0o644, len(source)), source)
            continue
        try:
            st = os.lstat(source)
        except OSError:
            st = None
        if st is not None and stat.S_ISLNK(st.st_mode):
            out.level(COMPRESS)
            out.entry(header(name, tarfile.SYMTYPE, 0o777, linkname=os.readlink(source)))
            continue
        if st is None or not stat.S_ISREG(st.st_mode):
            raise BuildError(f"file {source} (for {name}) does not exist")
        mode = 0o755 if st.st_mode & stat.S_IXUSR else 0o644
        out.level(level_for(source, st.st_size))
        out.entry(header(name, tarfile.REGTYPE, mode, st.st_size), source, st.st_size)
    out.level(COMPRESS)  # the tar end-of-archive blocks, padded to a whole record as tarfile pads them
    out.write(tarfile.NUL * (2 * tarfile.BLOCKSIZE))
    out.write(tarfile.NUL * (-out.offset % tarfile.RECORDSIZE))
    out.flush()
    gz.close()


_GATHER = 1 << 20


class _Gathered:
    """Tar members written to a SegmentedGzip through a buffer: one deflate call per ~1 MiB, not three
    or more per member."""

    def __init__(self, gz: SegmentedGzip) -> None:
        self.gz, self.offset = gz, 0
        self._pending: list[bytes | memoryview] = []
        self._size = 0

    def level(self, level: int) -> None:
        if level != self.gz.current_level:
            self.flush()
            self.gz.level(level)

    def write(self, data: bytes | memoryview) -> None:
        self._pending.append(data)
        self._size += len(data)
        self.offset += len(data)
        if self._size >= _GATHER:
            self.flush()

    def flush(self) -> None:
        if self._pending:
            self.gz.write(b"".join(self._pending))
            self._pending, self._size = [], 0

    def member(self, info: tarfile.TarInfo, content: bytes | Path | None = None) -> None:
        """One entry described by tarfile's TarInfo (the builder's own entries go through ``entry``)."""
        self.entry(info.tobuf(tarfile.GNU_FORMAT, tarfile.ENCODING, "surrogateescape"), content, info.size)

    def entry(self, head: bytes, content: bytes | Path | None = None, size: int = 0) -> None:
        """One entry: its header, its content (bytes, or ``size`` bytes read from a file) and the padding to
        a whole block, gathered at once."""
        if content is None:
            self._pending.append(head)
            self._grew(len(head))
            return
        if isinstance(content, bytes):
            size = len(content)
            pad = tarfile.NUL * (-size % tarfile.BLOCKSIZE)
            self._pending += (head, content, pad)
            self._grew(len(head) + size + len(pad))
            return
        self.write(head)
        with content.open("rb") as fh:
            left = size
            while left > 0:
                chunk = fh.read(min(left, _GATHER))
                if not chunk:
                    raise BuildError(f"file {content} shrank while it was archived; build again")
                self.write(chunk)
                left -= len(chunk)
        self.write(tarfile.NUL * (-size % tarfile.BLOCKSIZE))

    def _grew(self, size: int) -> None:
        self._size += size
        self.offset += size
        if self._size >= _GATHER:
            self.flush()


@contextmanager
def atomic_output(path: Path) -> Iterator[BinaryIO]:
    """Yield a temp file beside ``path``; rename it over ``path`` only if the block succeeds.

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
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def sweep_parts(path: Path) -> list[Path]:
    """Remove ``path``'s temp files left by writers that were killed (their pid, in the name, is gone).

    The folder is listed once while a process writes into it (1000 archives into one folder listed it
    1000 times): a part left by a writer killed after that is swept by the next build."""
    removed = []
    for name in _parts_in(path.parent).get(path.name, ()):
        pid = name[len(path.name) + 2:].split(".", 1)[0]
        if pid.isdigit() and not alive(int(pid)):
            (path.parent / name).unlink(missing_ok=True)
            removed.append(path.parent / name)
    return removed


_listed: dict[str, dict[str, list[str]]] = {}  # the last folder listed (one: long-lived processes stage many)


def _parts_in(folder: Path) -> dict[str, list[str]]:
    """The ``.<name>.<pid>.<random>.part`` files of a folder by ``<name>``, as first listed in this process."""
    key = os.path.abspath(folder)
    if key not in _listed:
        parts: dict[str, list[str]] = {}
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.name.startswith(".") and entry.name.endswith(".part"):
                    parts.setdefault(entry.name[1:].rsplit(".", 3)[0], []).append(entry.name)
        _listed.clear()
        _listed[key] = parts
    return _listed[key]


def write_bytes_atomic(path: Path, data: bytes) -> None:
    with atomic_output(path) as fh:
        fh.write(data)
