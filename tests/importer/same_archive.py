"""What "the same archive" means for an import: the same files, every config.pbtxt the same ModelConfig
message (names included), every other file byte for byte; only conch's manifest may differ."""

from __future__ import annotations

import tarfile
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

MANIFEST = "conch-manifest.json"


def contents(source: Path) -> dict[str, bytes]:
    """Every file of a repository folder or of an archive conch (or the tests) wrote, by path."""
    if source.is_dir():
        return {p.relative_to(source).as_posix(): p.read_bytes() for p in source.rglob("*") if p.is_file()}
    out: dict[str, bytes] = {}
    with tarfile.open(source) as tar:  # archives the tests made themselves
        for member in tar:
            data = tar.extractfile(member) if member.isfile() else None
            if data is not None:
                out[member.name.removeprefix("./")] = data.read()
    return out


def config(data: bytes) -> model_config_pb2.ModelConfig:
    return text_format.Parse(data.decode(), model_config_pb2.ModelConfig())


def assert_same(original: Path, rebuilt: Path) -> int:
    """Assert the two hold the same models; returns how many files were compared."""
    before = {k: v for k, v in contents(original).items() if k != MANIFEST}
    after = {k: v for k, v in contents(rebuilt).items() if k != MANIFEST}
    assert before, f"{original} holds no files: nothing to compare"
    assert sorted(after) == sorted(before)
    for name, data in before.items():
        if name.endswith("config.pbtxt"):
            assert config(after[name]) == config(data), name
        else:
            assert after[name] == data, f"{name} differs"
    return len(before)
