"""Archives are tarfile's GNU format with normalised members inside gzip with no name and mtime 0."""

from __future__ import annotations

import gzip
import io
import os
import subprocess
import tarfile
from pathlib import Path

from conch.builder.archive import member, write_tar


def test_the_gzip_header_names_no_file_no_time_and_no_host(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_bytes(b"a")
    buf = io.BytesIO()
    write_tar({"m/a.txt": tmp_path / "a.txt"}, buf)
    head = buf.getvalue()[:10]
    assert head[:3] == b"\x1f\x8b\x08"
    assert head[3] == 0, "flags: no FNAME, FEXTRA or FCOMMENT"
    assert head[4:8] == b"\0\0\0\0", "mtime 0"
    assert head[9] == 255, "OS unknown"


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
            tar.addfile(member(folder + "/", tarfile.DIRTYPE, 0o755))
        for name, data in [("m/config.pbtxt", b"name: 'm'\n"), ("m/empty", b"")]:
            tar.addfile(member(name, tarfile.REGTYPE, 0o644, len(data)), io.BytesIO(data))
        tar.addfile(member("m/src/link", tarfile.SYMTYPE, 0o777, linkname="run.sh"))
        tar.addfile(member("m/src/run.sh", tarfile.REGTYPE, 0o755, 10), io.BytesIO(b"#!/bin/sh\n"))
        tar.addfile(member("x" * 120 + "/long.txt", tarfile.REGTYPE, 0o644, 4), io.BytesIO(b"long"))
    assert gzip.decompress(buf.getvalue()) == expected.getvalue()
