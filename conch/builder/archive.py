"""Deterministic .tar.gz archives written atomically: the same files give the same bytes."""

from __future__ import annotations

import glob
import io
import os
import stat
import tarfile
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from conch.builder.deflate import COMPRESS, SegmentedGzip, level_for
from conch.builder.extract import safe_extract as safe_extract  # where callers have always found it
from conch.builder.scratch import alive
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


def _info(name: str, kind: bytes, mode: int, size: int = 0) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.size = size
    info.mtime = FIXED_MTIME
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def write_tar(files: Mapping[str, FileSource], fileobj: BinaryIO) -> None:
    """Write a deterministic gzip'd tar of ``files`` (path in archive -> bytes or file on disk).

    Each file is deflated at a level chosen from its content (deflate.level_for): already compressed
    content is stored instead of being compressed a second time."""
    entries = expand(files)
    names = sorted(entries)
    gz = SegmentedGzip(fileobj)
    with tarfile.open(fileobj=gz, mode="w", format=tarfile.GNU_FORMAT) as tar:  # type: ignore[call-overload]
        for d in sorted(_dirs_of(names)):
            tar.addfile(_info(d + "/", tarfile.DIRTYPE, 0o755))
        for name in names:
            if name.endswith("/"):
                continue
            source = entries[name]
            if isinstance(source, bytes):
                gz.level(level_for(source, len(source)))
                tar.addfile(_info(name, tarfile.REGTYPE, 0o644, len(source)), io.BytesIO(source))
                continue
            if source.is_symlink():
                info = _info(name, tarfile.SYMTYPE, 0o777)
                info.linkname = os.readlink(source)
                gz.level(COMPRESS)
                tar.addfile(info)
                continue
            if not source.is_file():
                raise BuildError(f"file {source} (for {name}) does not exist")
            st = source.stat()
            mode = 0o755 if st.st_mode & stat.S_IXUSR else 0o644
            gz.level(level_for(source, st.st_size))
            with source.open("rb") as fh:
                tar.addfile(_info(name, tarfile.REGTYPE, mode, st.st_size), fh)
        gz.level(COMPRESS)  # the tar end-of-archive blocks
    gz.close()


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
    """Remove ``path``'s temp files left by writers that were killed (their pid, in the name, is gone)."""
    removed = []
    for part in path.parent.glob(f".{glob.escape(path.name)}.*.part"):
        pid = part.name[len(path.name) + 2:].split(".", 1)[0]
        if pid.isdigit() and not alive(int(pid)):
            part.unlink(missing_ok=True)
            removed.append(part)
    return removed


def write_bytes_atomic(path: Path, data: bytes) -> None:
    with atomic_output(path) as fh:
        fh.write(data)
