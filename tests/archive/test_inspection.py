"""`conch inspect` on real built archives: the tree with sizes, each model's serving settings, environments,
the warmup and shared-memory sections, and the `conch check` verdict (exit 1 when it fails)."""

from __future__ import annotations

import gzip
import io
import json
import re
import tarfile
from pathlib import Path

import basic_steps
import numpy as np
import pytest
from hostile_archives import Entry, gzip_bomb, write_archive

from conch import DynamicBatching, Ensemble, InstanceGroup, PythonEnv, PythonStep, Tensor
from conch.archive.extract import safe_extract
from conch.archive.inspection import inspect_archive
from conch.builder.repository_build import build_ensemble
from conch.cli import main
from conch.errors import ArchiveError


def _env_archive(path: Path) -> Path:
    """An already packed environment for the 24.10 stub (Python 3.10), as `PythonEnv(archive=)` adopts it."""
    return write_archive(path, [("bin/activate", "file", b""),
                                ("lib/python3.10/site-packages/x.py", "file", b"x = 1\n" * 500)])


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A production archive with a GPU instance group, dynamic batching, an environment and a warmup."""
    tmp = tmp_path_factory.mktemp("inspect")
    ens = Ensemble("inspected", max_batch_size=4)
    step = PythonStep("double", basic_steps.double, inputs=[Tensor("x", "FP32", [4])],
                      outputs=[Tensor("y", "FP32", [4])],
                      max_batch_size=4, instance_group=InstanceGroup("KIND_GPU", count=2),
                      dynamic_batching=DynamicBatching((2, 4), max_queue_delay_microseconds=100),
                      env=PythonEnv(archive=_env_archive(tmp / "env.tar.gz")))
    ens.output("Y", step(ens.input("X", "FP32", [4])))
    ens.sample("ones", {"X": np.ones((2, 4), np.float32)}, {"Y": np.full((2, 4), 2, np.float32)})
    ens.warmup("ones")
    return build_ensemble(ens, tmp / "dist", "production", "24.10")


def test_inspect_shows_tree_configs_environments_warmup_shm_and_check(
        built: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(built)]) == 0
    out = capsys.readouterr().out
    assert "ensemble inspected  target production  release 24.10 (stub Python 3.10)" in out
    assert "compressed" in out and "unpacked in" in out
    lines = out.splitlines()
    assert any(line.strip().startswith("inspected__double/") and line.endswith("B") for line in lines)
    assert any(line.strip().startswith("model.py") for line in lines)
    assert ("  inspected__double: python, max_batch_size 4, 2 x KIND_GPU, dynamic batching (preferred [2, 4], max "
            "queue delay 100 µs)") in lines
    assert "    input  x FP32 [4]" in lines and "  inspected: ensemble of 1 steps, max_batch_size 4" in out
    env_line = lines[lines.index("environments:") + 1]
    assert env_line.startswith("  conch-envs/") and env_line.split(": ")[0].endswith(".tar.gz")
    assert re.search(r"\.tar\.gz: \d+ B, Python 3\.10, 0 pins, packed env", env_line), env_line
    assert "warmup: from sample 'ones': inspected__double batch 2 x1" in out
    assert "shared memory: needs 1.0 MB per Python-backend instance" in out
    assert lines[-1] == "check: ok"


def test_inspect_json_is_all_of_it(built: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", "--json", str(built)]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["check"] == {"ok": True, "findings": []}
    assert {"inspected__double/config.pbtxt", "conch-manifest.json"} <= {e["path"] for e in shown["tree"]}
    assert all(e["size"] >= 0 for e in shown["tree"]) and shown["unpacked_bytes"] > 0
    (step,) = [m for m in shown["models"] if m["model"] == "inspected__double"]
    assert step["instance_groups"] == ["2 x KIND_GPU"] and step["max_batch_size"] == 4
    assert step["dynamic_batching"] == {"preferred_batch_size": [2, 4], "max_queue_delay_microseconds": 100}
    assert step["inputs"] == [{"name": "x", "datatype": "FP32", "dims": [4]}]
    (env,) = shown["environments"].values()
    assert env["bytes"] > 0 and env["python"] == "3.10"
    manifest = shown["manifest"]
    assert manifest["warmup"]["source"] == "sample 'ones'" and manifest["shm"]["need_bytes"] > 0


def test_inspect_quiet_prints_nothing(built: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", "--quiet", str(built)]) == 0
    assert capsys.readouterr().out == ""


def test_an_archive_that_fails_check_exits_non_zero(built: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    broken = io.BytesIO()
    with tarfile.open(built) as src, tarfile.open(fileobj=broken, mode="w") as tar:
        for member in src:
            data = src.extractfile(member).read() if member.isfile() else None  # type: ignore[union-attr]
            if member.name == "inspected__double/config.pbtxt" and data is not None:
                data = data.replace(b'name: "inspected__double"', b'name: "renamed"')
                member.size = len(data)
            tar.addfile(member, io.BytesIO(data) if data is not None else None)
    archive = tmp_path / "inspected.tar.gz"
    archive.write_bytes(gzip.compress(broken.getvalue()))
    assert main(["inspect", str(archive)]) == 1
    captured = capsys.readouterr()
    assert "check: FAILED (1 errors)" in captured.out
    assert "names model 'renamed', but its folder is 'inspected__double'" in captured.out
    assert "conch: inspected.tar.gz fails `conch check`" in captured.err
    assert main(["inspect", "--json", str(archive)]) == 1
    assert json.loads(capsys.readouterr().out)["check"]["ok"] is False


def test_inspect_of_a_path_that_is_not_there(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(tmp_path / "gone.tar.gz")]) == 2
    assert "gone.tar.gz: no such archive; give the path of a .tar.gz built by `conch build`" in capsys.readouterr().err


def test_a_config_that_does_not_parse_is_summarized_with_the_parsers_words() -> None:
    from conch.archive.inspection import summarize_config

    bad = summarize_config("m", b'name: "m"\nplatform')
    assert bad.problem is not None and bad.problem.startswith("config.pbtxt does not parse (2:")
    assert (bad.served_as, bad.max_batch_size) == ("?", 0)
    latin = summarize_config("m", b'name: "caf\xe9"')
    assert latin.problem is not None and "'utf-8' codec can't decode byte 0xe9" in latin.problem


def _manifest(built: Path) -> Entry:
    with tarfile.open(built) as tar:
        member = tar.extractfile("conch-manifest.json")
        assert member is not None
        return ("conch-manifest.json", "file", member.read())


HOSTILE: dict[str, list[Entry]] = {
    "absolute path": [("/abs/escape.py", "file", b"x")],
    "dotdot path": [("m/../../escape.py", "file", b"x")],
    "absolute symlink": [("m/1/model.py", "symlink", "/etc/passwd")],
    "symlink leaving": [("m/1/model.py", "symlink", "../../../etc/passwd")],
    "hard link outside": [("m/1/model.py", "hardlink", "/etc/passwd")],
    "device": [("m/1/dev", "chr", b"")],
    "fifo": [("m/1/fifo", "fifo", b"")],
}


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_inspect_refuses_a_hostile_archive_as_safe_extraction_does(built: Path, tmp_path: Path, kind: str,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """The same refusal, word for word, as the local MME, `conch check` and deploy give: no tree is listed."""
    archive = write_archive(tmp_path / "hostile.tar.gz", [_manifest(built), *HOSTILE[kind]])
    with pytest.raises(ArchiveError, match=r"archive .*hostile\.tar\.gz: entry '.*'.*; refusing to unpack it") as ex:
        safe_extract(archive, tmp_path / "stage")
    with pytest.raises(ArchiveError, match=re.escape(str(ex.value))):
        inspect_archive(archive)
    assert main(["inspect", str(archive)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.splitlines() == [f"conch: error: {ex.value}"]


def test_inspect_refuses_a_gzip_bomb_before_inflating_it_whole(built: Path, tmp_path: Path) -> None:
    archive = gzip_bomb(tmp_path / "bomb.tar.gz", 300 * 2**20, [_manifest(built)])  # 300 MB of zeros in ~300 KB
    with pytest.raises(ArchiveError, match=r"entry 'model/1/zeros.bin' takes the unpacked size past \d+ bytes, the "
                       "most an archive of its size may unpack to \\(a possible gzip bomb\\); refusing to unpack it"):
        inspect_archive(archive)
