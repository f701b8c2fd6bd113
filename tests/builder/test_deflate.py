"""Archives deflate each file at a level chosen from its content and stay one ordinary gzip stream."""

from __future__ import annotations

import gzip
import io
import os
import subprocess
import tarfile
from pathlib import Path

from conch.builder.archive import write_tar
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
