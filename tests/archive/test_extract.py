"""Unpacking untrusted archives: each hostile class is refused by name and leaves nothing behind."""

from __future__ import annotations

import gzip
import io
import os
from pathlib import Path

import pytest
from hostile_archives import Entry, gzip_bomb, write_archive

from conch.archive.extract import safe_extract, scan_archive
from conch.errors import ArchiveError, ConchError

CONFIG = ("m/config.pbtxt", "file", 'name: "m"\nplatform: "ensemble"\n')


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A file beside the staging folder that no archive may touch."""
    path = tmp_path / "outside.py"
    path.write_text("print('host code')\n")
    return path


def refused(tmp_path: Path, entries: list[Entry], outside: Path, match: str) -> ArchiveError:
    archive = write_archive(tmp_path / "hostile.tar.gz", entries)
    stage = tmp_path / "stage"
    dest = stage / "hostile"
    with pytest.raises(ArchiveError, match=match) as caught:
        safe_extract(archive, dest)
    assert "hostile.tar.gz" in str(caught.value)
    assert outside.read_text() == "print('host code')\n"
    assert not dest.exists(), "a refused archive must leave nothing a caller could load"
    assert not stage.exists() or not any(stage.iterdir()), "the temp folder must be cleaned up"
    return caught.value


def test_a_good_archive_unpacks_with_links_inside_and_modes(tmp_path: Path) -> None:
    archive = write_archive(tmp_path / "good.tar.gz", [
        ("./", "dir", b""), CONFIG, ("m/1/", "dir", b""),
        ("env/bin/python3.10", "file", b"#!"), ("env/bin/python3", "symlink", "python3.10"),
        ("env/lib64", "symlink", "lib"), ("env/lib/a.so", "file", b"x"), ("env/lib/b.so", "hardlink", "env/lib/a.so"),
        ("m/1/model.py", "file", b"first"), ("m/1/model.py", "file", b"second"),
    ])
    dest = tmp_path / "out"
    safe_extract(archive, dest)
    assert (dest / "m" / "1").is_dir()
    assert (dest / "m" / "1" / "model.py").read_bytes() == b"second"
    assert os.readlink(dest / "env" / "bin" / "python3") == "python3.10"
    assert (dest / "env" / "lib64" / "a.so").read_bytes() == b"x"
    assert (dest / "env" / "lib" / "b.so").read_bytes() == b"x"


def test_unpacks_into_an_existing_empty_folder_but_not_a_full_one(tmp_path: Path) -> None:
    archive = write_archive(tmp_path / "good.tar.gz", [CONFIG])
    (tmp_path / "empty").mkdir()
    safe_extract(archive, tmp_path / "empty")
    assert (tmp_path / "empty" / "m" / "config.pbtxt").is_file()
    with pytest.raises(ArchiveError, match="exists and is not an empty folder"):
        safe_extract(archive, tmp_path / "empty")


def test_absolute_path_is_refused(tmp_path: Path, outside: Path) -> None:
    refused(tmp_path, [CONFIG, (str(outside), "file", b"pwned")], outside, "entry '/.*outside.py' has an absolute path")


def test_dotdot_path_is_refused(tmp_path: Path, outside: Path) -> None:
    refused(tmp_path, [CONFIG, ("m/../../outside.py", "file", b"pwned")], outside,
            r"entry 'm/../../outside.py' has a '\.\.' component")


def test_hard_link_to_an_outside_file_then_a_file_of_its_name_is_refused(tmp_path: Path, outside: Path) -> None:
    refused(tmp_path, [CONFIG, ("m/1/model.py", "hardlink", str(outside)), ("m/1/model.py", "file", b"pwned")],
            outside, r"entry 'm/1/model.py' is a hard link to '/.*outside.py', which is not a file this archive wrote")


def test_hard_link_to_a_file_not_yet_extracted_is_refused(tmp_path: Path, outside: Path) -> None:
    refused(tmp_path, [("m/a", "hardlink", "m/b"), ("m/b", "file", b"x")], outside, "entry 'm/a' is a hard link")


def test_absolute_symlink_is_refused(tmp_path: Path, outside: Path) -> None:
    refused(tmp_path, [CONFIG, ("m/1/model.py", "symlink", str(outside))], outside,
            "entry 'm/1/model.py' is a symlink to the absolute path")


def test_relative_symlink_leaving_the_folder_is_refused(tmp_path: Path, outside: Path) -> None:
    refused(tmp_path, [CONFIG, ("m/1/model.py", "symlink", "../../../outside.py")], outside,
            r"entry 'm/1/model.py' is a symlink to '\.\./\.\./\.\./outside.py', which leaves")


def test_symlink_chain_leaving_the_folder_is_refused(tmp_path: Path, outside: Path) -> None:
    # Each link stays inside on its own; followed through each other they reach the parent folder.
    entries: list[Entry] = [("d/up", "symlink", ".."), ("s", "symlink", "d/up"), ("t", "symlink", "s/../outside.py")]
    refused(tmp_path, entries, outside, "through other links leaves")


def test_writing_through_a_symlinked_folder_is_refused(tmp_path: Path, outside: Path) -> None:
    refused(tmp_path, [("m", "symlink", "."), ("m/config.pbtxt", "file", b"x")], outside,
            "entry 'm/config.pbtxt' lies under the symlink 'm'")


@pytest.mark.parametrize(("kind", "what"), [("chr", "a character device"), ("blk", "a block device"),
                                            ("fifo", "a FIFO")])
def test_devices_and_fifos_are_refused(tmp_path: Path, outside: Path, kind: str, what: str) -> None:
    refused(tmp_path, [CONFIG, ("m/1/dev", kind, b"")], outside, f"entry 'm/1/dev' is {what}")


def test_gzip_bomb_is_refused_before_it_is_written(tmp_path: Path, outside: Path) -> None:
    archive = gzip_bomb(tmp_path / "hostile.tar.gz", 300 * 2**20)  # 300 MB of zeros in ~300 KB
    assert archive.stat().st_size < 2**20
    with pytest.raises(ArchiveError, match="entry 'model/1/zeros.bin' takes the unpacked size past .* gzip bomb"):
        safe_extract(archive, tmp_path / "stage" / "hostile")
    assert not (tmp_path / "stage" / "hostile").exists()
    assert outside.read_text() == "print('host code')\n"


def test_total_size_and_entry_count_limits_are_keywords(tmp_path: Path, outside: Path) -> None:
    archive = write_archive(tmp_path / "hostile.tar.gz", [(f"m/{i}", "file", b"1234") for i in range(10)])
    with pytest.raises(ArchiveError, match="entry 'm/5' is past the limit of 5 entries"):
        safe_extract(archive, tmp_path / "a", max_entries=5)
    with pytest.raises(ArchiveError, match="entry 'm/2' takes the unpacked size past the limit of 10 bytes"):
        safe_extract(archive, tmp_path / "b", max_bytes=10)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    safe_extract(archive, tmp_path / "c", max_entries=10, max_bytes=40)


def test_truncated_archive_is_a_clean_error(tmp_path: Path) -> None:
    good = write_archive(tmp_path / "good.tar.gz", [CONFIG, ("m/1/model.py", "file", os.urandom(50_000))])
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(ArchiveError, match=r"cut.tar.gz is not a readable .tar.gz .*truncated"):
        safe_extract(cut, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_truncated_gzip_trailer_is_caught(tmp_path: Path) -> None:
    good = write_archive(tmp_path / "good.tar.gz", [CONFIG])
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(good.read_bytes()[:-4])  # the tar is whole; the gzip length field is gone
    with pytest.raises(ArchiveError, match="cut.tar.gz is not a readable"):
        safe_extract(cut, tmp_path / "out")


def test_corrupt_gzip_is_a_clean_error(tmp_path: Path) -> None:
    data = bytearray(write_archive(tmp_path / "good.tar.gz", [CONFIG, ("m/x", "file", os.urandom(5000))]).read_bytes())
    data[200:260] = bytes(60)
    (tmp_path / "bad.tar.gz").write_bytes(bytes(data))
    with pytest.raises(ArchiveError, match="bad.tar.gz is not a readable .tar.gz"):
        safe_extract(tmp_path / "bad.tar.gz", tmp_path / "out")


def test_a_file_that_is_not_an_archive_is_a_clean_error(tmp_path: Path) -> None:
    (tmp_path / "notes.tar.gz").write_text("just some text, not gzip\n" * 40)
    (tmp_path / "gz.tar.gz").write_bytes(gzip.compress(b"gzip of text, not of a tar\n" * 40))
    for name in ("notes.tar.gz", "gz.tar.gz"):
        with pytest.raises(ConchError, match=f"{name} is not a readable .tar.gz"):
            safe_extract(tmp_path / name, tmp_path / "out")


def test_missing_archive_is_a_clean_error(tmp_path: Path) -> None:
    with pytest.raises(ArchiveError, match="cannot read archive .*missing.tar.gz"):
        safe_extract(tmp_path / "missing.tar.gz", tmp_path / "out")


def test_a_plain_tar_unpacks(tmp_path: Path) -> None:
    archive = write_archive(tmp_path / "env.tar", [("bin/activate", "file", b"")], compress=False)
    safe_extract(archive, tmp_path / "out")
    assert (tmp_path / "out" / "bin" / "activate").is_file()


def test_gzip_members_and_zero_padding_unpack_and_trailing_bytes_are_refused(tmp_path: Path) -> None:
    """As GNU tar does: a gzip of several members and one padded with zeros unpack; other bytes after the last
    member are refused (`tar xzf` says "trailing garbage ignored" and exits 2, "not recoverable")."""
    tar = gzip.decompress(write_archive(tmp_path / "one.tar.gz", [CONFIG, ("m/x", "file", os.urandom(5000))])
                          .read_bytes())
    half = len(tar) // 2
    for name, data in (("members", gzip.compress(tar[:half]) + gzip.compress(tar[half:])),
                       ("padded", gzip.compress(tar) + bytes(512))):
        (tmp_path / f"{name}.tar.gz").write_bytes(data)
        safe_extract(tmp_path / f"{name}.tar.gz", tmp_path / name)
        assert (tmp_path / name / "m" / "x").stat().st_size == 5000
    (tmp_path / "tail.tar.gz").write_bytes(gzip.compress(tar) + b"uploaded twice")
    with pytest.raises(ArchiveError, match="tail.tar.gz is not a readable .tar.gz"):
        safe_extract(tmp_path / "tail.tar.gz", tmp_path / "tail")
    assert not (tmp_path / "tail").exists()


def test_a_stream_that_cannot_seek_is_scanned(tmp_path: Path) -> None:
    """An S3 body is read once, front to back: the bytes read to tell gzip from tar are not lost."""
    archive = write_archive(tmp_path / "a.tar.gz", [CONFIG])
    for data in (archive.read_bytes(), gzip.decompress(archive.read_bytes())):
        with io.BufferedReader(_OneWay(data)) as stream:
            found = scan_archive(stream, "s3://bucket/a.tar.gz", lambda name: name.endswith("config.pbtxt"))
        assert found == {"m/config.pbtxt": CONFIG[2].encode()}


class _OneWay(io.RawIOBase):
    def __init__(self, data: bytes) -> None:
        self.data = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        return self.data.readinto(buffer)
