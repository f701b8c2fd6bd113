"""Unpack untrusted archives in one streaming pass: nothing lands outside the folder, nothing half-written.

Python's tarfile ``data`` filter is the floor here, not the ceiling: entries are written by this module
(never through a symlink, never over an existing link), hard links may only point at files this archive
already wrote, and sizes and entry counts are capped as they stream, so a gzip bomb stops early.
"""

from __future__ import annotations

import io
import os
import posixpath
import shutil
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from isal import igzip, isal_zlib

from conch.errors import ArchiveError

DEFAULT_MAX_BYTES = 64 * 2**30  # unpacked file bytes; the largest MME archives hold a few GB of weights
DEFAULT_MAX_ENTRIES = 200_000  # a packed torch environment holds ~20k files
DEFAULT_MAX_RATIO = 200  # unpacked bytes per archive byte: real archives compress 1-10x, bombs 1000x
RATIO_FLOOR = 64 * 2**20  # below this, the ratio is not checked (tiny archives of configs compress well)
MAX_FILE = 1 << 20  # scan_archive reads no larger file
_CHUNK = 1 << 20
_GZIP_MAGIC = b"\x1f\x8b"


def safe_extract(
    archive: Path,
    dest: Path,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_entries: int = DEFAULT_MAX_ENTRIES,
) -> None:
    """Unpack ``archive`` (.tar.gz or .tar) into ``dest``, which must be missing or an empty folder.

    The archive is unpacked into a temp folder beside ``dest`` and renamed onto it only when every entry
    passed, so a refused or corrupt archive leaves nothing a caller could load.

    Raises:
        ArchiveError: naming the archive and the entry, for an unsafe, oversized or unreadable archive.
    """
    archive, dest = Path(archive), Path(dest)
    if dest.is_symlink() or (dest.exists() and (not dest.is_dir() or any(dest.iterdir()))):
        raise ArchiveError(f"cannot unpack {archive} into {dest}: it exists and is not an empty folder; "
                           "give a new or empty folder")
    try:
        size = archive.stat().st_size
    except OSError as exc:
        raise ArchiveError(f"cannot read archive {archive}: {exc.strerror or exc}; give the path of a .tar.gz"
                           ) from None
    if not archive.is_file():
        raise ArchiveError(f"archive {archive} is not a file; give the path of a .tar.gz")
    budget = min(max_bytes, max(RATIO_FLOOR, int(DEFAULT_MAX_RATIO * size)))
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".unpacking", dir=dest.parent))
    try:
        _Unpacker(archive, tmp, budget, max_bytes, max_entries).run()
        tmp.chmod(0o755)
        if dest.exists():
            dest.rmdir()
        os.replace(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def scan_archive(
    stream: BinaryIO,
    archive: str,
    wanted: Callable[[str], bool],
    *,
    size: int | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_entries: int = DEFAULT_MAX_ENTRIES,
) -> dict[str, bytes]:
    """Read an untrusted archive (.tar.gz or .tar, from any stream: a file, an S3 body) in one pass without
    writing anything: the bytes of the regular files whose cleaned path ``wanted`` accepts (each at most
    MAX_FILE bytes), under the entry rules of :func:`safe_extract` (paths, kinds, counts, sizes); every other
    file's bytes are inflated past and dropped. ``size`` (the archive's bytes, when known) caps the unpacked
    size by DEFAULT_MAX_RATIO as safe_extract does.

    Raises:
        ArchiveError: naming ``archive`` and the entry, for an unsafe, oversized or unreadable archive.
    """
    budget = max_bytes if size is None else min(max_bytes, max(RATIO_FLOOR, int(DEFAULT_MAX_RATIO * size)))
    found: dict[str, bytes] = {}
    checker = _Unpacker(Path(archive), Path("."), budget, max_bytes, max_entries)

    def read(tar: tarfile.TarFile, member: tarfile.TarInfo) -> None:
        name = checker.clean(member.name, member.name)
        if not (member.isdir() or member.isreg() or member.issym() or member.islnk()):
            raise checker.refuse(member.name, "is not a folder, file or link; an MME archive holds only "
                                 "folders, files and symlinks")
        if not member.isreg():
            return
        checker.total += member.size
        if checker.total > budget:
            raise checker.refuse(member.name, f"takes the unpacked size past {budget} bytes (a possible "
                                 "gzip bomb)")
        if name is not None and member.size <= MAX_FILE and wanted(name):
            data = tar.extractfile(member)
            found[name] = data.read() if data is not None else b""
            if len(found[name]) != member.size:
                raise checker.refuse(member.name, f"ends after {len(found[name])} of its {member.size} "
                                     "bytes (truncated archive)")

    checker.each_entry(stream, read)
    return found


class _Prefixed(io.RawIOBase):
    """``fh`` with the bytes read to tell gzip from tar put back in front (an S3 body cannot seek back)."""

    def __init__(self, head: bytes, fh: BinaryIO) -> None:
        self.head, self.fh = head, fh

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.head[: len(buffer)] if self.head else self.fh.read(len(buffer))
        self.head = self.head[len(data):]
        buffer[: len(data)] = data
        return len(data)


class _Unpacker:
    """One pass over the archive's entries, checking each before anything is written."""

    def __init__(self, archive: Path, root: Path, budget: int, max_bytes: int, max_entries: int) -> None:
        self.archive, self.root = archive, root
        self.budget, self.max_bytes, self.max_entries = budget, max_bytes, max_entries
        self.total = 0
        self.dirs: set[str] = set()
        self.files: set[str] = set()
        self.links: dict[str, str] = {}

    def refuse(self, entry: str, why: str) -> ArchiveError:
        return ArchiveError(f"archive {self.archive}: entry {entry!r} {why}; refusing to unpack it")

    def run(self) -> None:
        with self.archive.open("rb") as fh:
            self.each_entry(fh, self.entry)
        self.check_links()

    def each_entry(self, fh: BinaryIO, each: Callable[[tarfile.TarFile, tarfile.TarInfo], None]) -> None:
        """``each`` of the archive's entries in one pass, past the entry limit refused; an ArchiveError for an
        archive that cannot be read (truncated, corrupt, not a tar)."""
        try:
            head = fh.read(2)
            # python-isal's gzip reader: ISA-L's inflate, every member's CRC and length checked
            stream: Any = igzip.IGzipFile(fileobj=_Prefixed(head, fh)) if head == _GZIP_MAGIC else _Prefixed(head, fh)
            # tarfile's stream mode reads its file object in bufsize pieces: 10 KiB by default, which
            # made moving bytes cost more than inflating them
            with tarfile.open(fileobj=stream, mode="r|", bufsize=_CHUNK) as tar:
                for count, member in enumerate(tar, start=1):
                    if count > self.max_entries:
                        raise self.refuse(member.name, f"is past the limit of {self.max_entries} entries "
                                          "(a possible archive bomb)")
                    each(tar, member)
            while stream.read(_CHUNK):  # to the end: a corrupt trailer after the tar's end marker
                pass
        except (tarfile.TarError, EOFError, igzip.BadGzipFile, isal_zlib.error) as exc:  # type: ignore[misc]  # isal types it as an instance
            raise ArchiveError(
                f"archive {self.archive} is not a readable .tar.gz ({exc}); it may be truncated or corrupt: "
                "rebuild it with `conch build` or copy it again"
            ) from None

    def entry(self, tar: tarfile.TarFile, member: tarfile.TarInfo) -> None:
        name = self.clean(member.name, member.name)
        if name is None:  # the archive root itself ("./")
            if not member.isdir():
                raise self.refuse(member.name, "would replace the archive root")
            return
        if member.isdir():
            self.make_dir(member.name, name)
        elif member.isreg():
            self.write_file(tar, member, name)
        elif member.issym():
            self.make_symlink(member, name)
        elif member.islnk():
            self.make_hardlink(member, name)
        else:
            kind = ("a character device" if member.ischr() else "a block device" if member.isblk()
                    else "a FIFO" if member.isfifo() else f"of unknown tar type {member.type!r}")
            raise self.refuse(member.name, f"is {kind}; an MME archive holds only folders, files and symlinks")

    def clean(self, entry: str, name: str) -> str | None:
        """``name`` relative to the root, or None for the root; refuses absolute and ``..`` paths."""
        if name.startswith("/"):
            raise self.refuse(entry, "has an absolute path; entries must be relative to the archive root")
        parts = [p for p in name.split("/") if p not in ("", ".")]
        if ".." in parts:
            raise self.refuse(entry, "has a '..' component and would land outside the folder")
        return "/".join(parts) or None

    def parent_ready(self, entry: str, name: str) -> Path:
        """Create the folders above ``name`` (never through a symlink) and clear what ``name`` replaces."""
        parts = name.split("/")
        for i in range(1, len(parts)):
            above = "/".join(parts[:i])
            if above in self.dirs:
                continue
            if above in self.links:
                raise self.refuse(entry, f"lies under the symlink {above!r}; writing through links is refused")
            if above in self.files:
                raise self.refuse(entry, f"lies under {above!r}, which the archive wrote as a file")
            (self.root / above).mkdir(mode=0o755)
            self.dirs.add(above)
        if name in self.dirs:
            raise self.refuse(entry, "would replace a folder of the same name")
        path = self.root / name
        if name in self.files or name in self.links:
            path.unlink()  # a later entry of the same name wins, as with tar, but is never written through
            self.files.discard(name)
            self.links.pop(name, None)
        return path

    def make_dir(self, entry: str, name: str) -> None:
        if name in self.dirs:
            return
        path = self.parent_ready(entry, name)
        path.mkdir(mode=0o755)
        self.dirs.add(name)

    def write_file(self, tar: tarfile.TarFile, member: tarfile.TarInfo, name: str) -> None:
        if self.total + member.size > self.budget:
            limit = (f"the limit of {self.max_bytes} bytes" if self.budget == self.max_bytes
                     else f"{self.budget} bytes, the most an archive of its size may unpack to")
            raise self.refuse(member.name, f"takes the unpacked size past {limit} (a possible gzip bomb)")
        path = self.parent_ready(member.name, name)
        source = tar.extractfile(member)
        assert source is not None  # a regular file always has a data stream
        written = 0
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as out:
            while chunk := source.read(_CHUNK):
                out.write(chunk)
                written += len(chunk)
            os.fchmod(out.fileno(), 0o755 if member.mode & 0o100 else 0o644)
        if written != member.size:
            raise self.refuse(member.name, f"ends after {written} of its {member.size} bytes (truncated archive)")
        os.utime(path, (member.mtime, member.mtime))
        self.total += written
        self.files.add(name)

    def make_symlink(self, member: tarfile.TarInfo, name: str) -> None:
        target = member.linkname
        if not target or target.startswith("/"):
            raise self.refuse(member.name, f"is a symlink to the absolute path {target!r}; links must stay "
                              "inside the archive and be relative")
        landing = posixpath.normpath(posixpath.join(posixpath.dirname(name), target))
        if landing == ".." or landing.startswith("../"):
            raise self.refuse(member.name, f"is a symlink to {target!r}, which leaves the archive's folder")
        path = self.parent_ready(member.name, name)
        os.symlink(target, path)
        self.links[name] = target

    def make_hardlink(self, member: tarfile.TarInfo, name: str) -> None:
        parts = [p for p in member.linkname.split("/") if p not in ("", ".")]
        target = "/".join(parts)
        if member.linkname.startswith("/") or ".." in parts or target not in self.files:
            raise self.refuse(member.name, f"is a hard link to {member.linkname!r}, which is not a file this "
                              "archive wrote before it; hard links may only repeat an earlier file")
        path = self.parent_ready(member.name, name)
        os.link(self.root / target, path, follow_symlinks=False)
        self.files.add(name)

    def check_links(self) -> None:
        """Every symlink, followed through the others, still lands inside the folder."""
        root = os.path.realpath(self.root)
        for name, target in sorted(self.links.items()):
            landing = os.path.realpath(self.root / name)
            if landing != root and not landing.startswith(root + os.sep):
                raise self.refuse(name, f"is a symlink to {target!r}, which through other links leaves the "
                                  "archive's folder")
