"""One gzip member written in segments, each deflated at its own level: content that does not compress
(a nested .tar.gz, float weights) is stored, the rest is compressed. Any gunzip reads it as usual."""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path
from typing import BinaryIO

from conch.ensembles.layout import FileSource

STORE = 0
COMPRESS = 6  # level for text and code; measured in benchmarks/archive_levels.py
# A file whose samples deflate to more than this fraction of their size is stored (float weights: 0.92,
# an already gzipped environment: 0.99; JSON, Python, shared libraries: 0.2-0.5).
STORE_ABOVE = 0.9
_PROBE = 1 << 16
_PROBES = 5
_SMALL = 1 << 18  # smaller files are always compressed: too small for the decision to matter
_STORED_BLOCK = 0xFFFF
# Fixed header: no name, mtime 0, no extra flags, OS "unknown" so that no host shows through.
_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"


def level_for(source: FileSource, size: int) -> int:
    """STORE for content that deflate cannot shrink by a tenth, else COMPRESS (decided from the content:
    the median ratio of a few probes spread through the file, so a compressible header does not decide)."""
    if size < _SMALL:
        return COMPRESS
    ratios = []
    with _open(source) as fh:
        for index in range(_PROBES):
            fh.seek((2 * index + 1) * size // (2 * _PROBES))
            block = fh.read(_PROBE)
            ratios.append(len(zlib.compress(block, 1)) / max(1, len(block)))
    return STORE if sorted(ratios)[_PROBES // 2] > STORE_ABOVE else COMPRESS


def _open(source: FileSource) -> BinaryIO:
    return io.BytesIO(source) if isinstance(source, bytes) else Path(source).open("rb")


class SegmentedGzip:
    """A write-only gzip stream; ``level(n)`` before a write sets how the following bytes are deflated.

    Segments are joined the way pigz joins its blocks: each compressed segment ends with a sync flush
    (byte-aligned, not final) and stored segments are raw stored blocks, so the result is one valid
    deflate stream. The output depends only on the bytes and the levels, never on the host or the time."""

    def __init__(self, out: BinaryIO) -> None:
        self._out = out
        self._crc = 0
        self._size = 0
        self._level = COMPRESS
        self._deflater: zlib._Compress | None = None
        out.write(_HEADER)

    @property
    def current_level(self) -> int:
        return self._level

    def level(self, level: int) -> None:
        if level != self._level:
            self._end_segment()
            self._level = level

    def write(self, data: bytes) -> int:
        view = memoryview(data)
        self._crc = zlib.crc32(view, self._crc)
        self._size += len(view)
        if self._level == STORE:
            for start in range(0, len(view), _STORED_BLOCK):
                block = view[start:start + _STORED_BLOCK]
                self._out.write(struct.pack("<BHH", 0, len(block), len(block) ^ 0xFFFF))
                self._out.write(block)
        else:
            if self._deflater is None:
                self._deflater = zlib.compressobj(self._level, zlib.DEFLATED, -zlib.MAX_WBITS)
            self._out.write(self._deflater.compress(view))
        return len(view)

    def tell(self) -> int:
        return self._size

    def _end_segment(self) -> None:
        if self._deflater is not None:
            self._out.write(self._deflater.flush(zlib.Z_SYNC_FLUSH))
            self._deflater = None

    def close(self) -> None:
        deflater = self._deflater or zlib.compressobj(COMPRESS, zlib.DEFLATED, -zlib.MAX_WBITS)
        self._out.write(deflater.flush(zlib.Z_FINISH))  # the final (possibly empty) block
        self._deflater = None
        self._out.write(struct.pack("<II", self._crc & 0xFFFFFFFF, self._size & 0xFFFFFFFF))
