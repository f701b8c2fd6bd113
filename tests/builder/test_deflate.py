"""Archives deflate each file at a level chosen from its content and stay one ordinary gzip stream."""

from __future__ import annotations

import gzip
import io
import os
import subprocess
import tarfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from conch.builder.archive import _info, header, write_tar
from conch.builder.deflate import COMPRESS, STORE, level_for


def test_incompressible_content_is_stored_and_text_is_compressed(tmp_path: Path) -> None:
    noise = os.urandom(1 << 20)
    text = b"name: 'x'\n" * 100_000
    assert level_for(noise, len(noise)) == STORE
    assert level_for(text, len(text)) == COMPRESS
    buf = io.BytesIO()
    write_tar({"a/noise.bin": noise, "a/text.txt": text}, buf)
    assert len(noise) < len(buf.getvalue()) < len(noise) + len(text) // 10


def test_the_archive_reads_back_with_gzip_tarfile_and_tar(tmp_path: Path) -> None:
    files = {"m/1/weights.bin": os.urandom(600_000), "m/config.pbtxt": b"name: 'm'\n" * 50, "m/1/empty": b""}
    (tmp_path / "big.npy").write_bytes(os.urandom(300_000) + b"\0" * 300_000)
    files_with_path: dict[str, bytes | Path] = {**files, "m/1/big.npy": tmp_path / "big.npy"}
    archive = tmp_path / "x.tar.gz"
    with archive.open("wb") as fh:
        write_tar(files_with_path, fh)
    gzip.decompress(archive.read_bytes())  # checks the CRC and length trailer
    with tarfile.open(archive, "r|gz") as tar:  # one streaming pass
        read = {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}  # type: ignore[union-attr]
    assert read == {**files, "m/1/big.npy": (tmp_path / "big.npy").read_bytes()}
    out = tmp_path / "out"
    out.mkdir()
    subprocess.run(["tar", "-C", str(out), "-xzf", str(archive)], check=True)
    assert (out / "m" / "1" / "weights.bin").read_bytes() == files["m/1/weights.bin"]


def test_same_files_same_bytes() -> None:
    files = {"a/noise.bin": os.urandom(400_000), "a/b.txt": b"text " * 1000}
    one, two = io.BytesIO(), io.BytesIO()
    write_tar(files, one)
    write_tar(dict(reversed(list(files.items()))), two)
    assert one.getvalue() == two.getvalue()


@settings(max_examples=100, deadline=None)
@given(name=st.text(min_size=1, max_size=130),
       kind=st.sampled_from([tarfile.REGTYPE, tarfile.DIRTYPE, tarfile.SYMTYPE]),
       mode=st.sampled_from([0o644, 0o755, 0o777]), size=st.integers(0, 8 ** 11 + 5) | st.integers(0, 5000),
       link=st.text(max_size=130))
def test_each_header_is_the_one_tarfile_writes(name: str, kind: bytes, mode: int, size: int, link: str) -> None:
    """write_tar builds its GNU headers itself; they are tarfile's, byte for byte (long names and links,
    non-ASCII and undecodable names, sizes past 8 GiB go through tarfile's own extensions)."""
    info = _info(name, kind, mode, size)
    info.linkname = link
    assert header(name, kind, mode, size, link) == info.tobuf(tarfile.GNU_FORMAT, tarfile.ENCODING, "surrogateescape")


def test_an_archive_is_what_tarfile_writes_for_the_same_entries(tmp_path: Path) -> None:
    """The tar stream inside the gzip is tarfile's GNU format for the same members: folders first, then files
    by name, links kept, every entry owned by root at the fixed mtime."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "run.sh").write_bytes(b"#!/bin/sh\n")
    (tmp_path / "src" / "run.sh").chmod(0o755)
    (tmp_path / "src" / "link").symlink_to("run.sh")
    files: dict[str, bytes | Path] = {"m/config.pbtxt": b"name: 'm'\n", "m/1/": b"", "m/src": tmp_path / "src",
                                      "x" * 120 + "/long.txt": b"long", "m/empty": b""}
    buf = io.BytesIO()
    write_tar(files, buf)
    expected = io.BytesIO()
    with tarfile.open(fileobj=expected, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for folder in ["m", "m/1", "m/src", "x" * 120]:
            tar.addfile(_info(folder + "/", tarfile.DIRTYPE, 0o755))
        for name, data in [("m/config.pbtxt", b"name: 'm'\n"), ("m/empty", b"")]:
            tar.addfile(_info(name, tarfile.REGTYPE, 0o644, len(data)), io.BytesIO(data))
        link = _info("m/src/link", tarfile.SYMTYPE, 0o777)
        link.linkname = "run.sh"
        tar.addfile(link)
        tar.addfile(_info("m/src/run.sh", tarfile.REGTYPE, 0o755, 10), io.BytesIO(b"#!/bin/sh\n"))
        tar.addfile(_info("x" * 120 + "/long.txt", tarfile.REGTYPE, 0o644, 4), io.BytesIO(b"long"))
    assert gzip.decompress(buf.getvalue()) == expected.getvalue()
