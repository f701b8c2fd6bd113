"""Nothing left behind and no build-machine path inside: files= symlinks archived as content, temp files and
folders of a killed run removed by the next one, local envs that name no host Python."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from conch.atomic_write import atomic_output
from conch.builder.archive import expand, write_tar
from conch.scratch import scratch_dir, sweep


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def members(data: bytes) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return {m.name: m for m in tar.getmembers()}


def test_a_symlink_in_files_is_archived_as_its_content(tmp_path: Path) -> None:
    host = tmp_path / "host"
    host.mkdir()
    (host / "vocab.txt").write_text("a\nb\n")
    (host / "folder").mkdir()
    (host / "folder" / "inner.txt").write_text("inner")
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "real.txt").write_text("real")
    (tree / "same").symlink_to("real.txt")  # relative and inside: stays a link
    (tree / "out").symlink_to(host / "vocab.txt")  # absolute: becomes content
    (tree / "outdir").symlink_to(host / "folder")
    (tmp_path / "link.txt").symlink_to(host / "vocab.txt")
    raw = io.BytesIO()
    write_tar({"m/1/vocab.txt": tmp_path / "link.txt", "m/1/tree": tree}, raw)
    found = members(raw.getvalue())
    assert found["m/1/vocab.txt"].isreg() and found["m/1/vocab.txt"].size == 4
    assert found["m/1/tree/out"].isreg()
    assert found["m/1/tree/outdir/inner.txt"].isreg()
    assert found["m/1/tree/same"].issym() and found["m/1/tree/same"].linkname == "real.txt"
    assert str(tmp_path).encode() not in raw.getvalue()


def test_a_symlink_loop_is_refused(tmp_path: Path) -> None:
    from conch.errors import BuildError

    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "up").symlink_to(tmp_path)
    with pytest.raises(BuildError, match="symlinks loop back"):
        expand({"x": tree})


def test_part_files_of_a_killed_writer_are_removed_by_the_next_write(tmp_path: Path) -> None:
    target = tmp_path / "dist" / "e.tar.gz"
    target.parent.mkdir()
    stale = target.parent / f".e.tar.gz.{dead_pid()}.abc123.part"
    stale.write_bytes(b"half")
    live = target.parent / f".e.tar.gz.{os.getppid()}.def456.part"  # a writer still running
    live.write_bytes(b"busy")
    with atomic_output(target) as fh:
        fh.write(b"done")
    assert target.read_bytes() == b"done"
    assert not stale.exists() and live.exists()


def test_scratch_folders_of_dead_processes_are_swept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONCH_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr("conch.scratch._mine", None)
    root = tmp_path / "scratch"
    (root / str(dead_pid()) / "conch-resolve-x" / "pip-target-y").mkdir(parents=True)
    (root / str(os.getppid())).mkdir()
    mine = scratch_dir()
    assert mine == root / str(os.getpid()) and mine.is_dir()
    assert sorted(p.name for p in root.iterdir()) == sorted([str(os.getpid()), str(os.getppid())])
    assert sweep(root) == [mine]  # this process's own id is only stale before it claims it


def test_killed_build_leaves_nothing_the_next_run_does_not_remove(tmp_path: Path) -> None:
    env = {**os.environ, "CONCH_CACHE_DIR": str(tmp_path / "cache")}
    code = ("import os, sys, time; from pathlib import Path\n"
            "from conch.scratch import scratch_temp\nfrom conch.atomic_write import atomic_output\n"
            "t = scratch_temp('conch-resolve-'); Path(t.name, 'pip-target-x').mkdir()\n"
            "w = atomic_output(Path(sys.argv[1])); w.__enter__().write(b'x'); print('ready', flush=True)\n"
            "time.sleep(60)\n")
    out = tmp_path / "dist" / "e.tar.gz"
    child = subprocess.Popen([sys.executable, "-c", code, str(out)], env=env, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline() == "ready\n"
    child.kill()
    child.wait()
    assert list((tmp_path / "cache" / "scratch").iterdir()) and list(out.parent.glob("*.part"))
    subprocess.run([sys.executable, "-c", code.replace("time.sleep(60)", "w.__exit__(None, None, None)"), str(out)],
                   env=env, check=True, capture_output=True)
    assert not list(out.parent.glob("*.part")) and out.read_bytes() == b"x"
    assert not list((tmp_path / "cache" / "scratch").iterdir())


def all_bytes(archive: Path) -> bytes:
    """Every file's bytes in an archive, nested .tar.gz environments unpacked too."""
    chunks = []
    with tarfile.open(archive) as tar:
        for member in tar:
            data = tar.extractfile(member).read() if member.isfile() else b""  # type: ignore[union-attr]
            chunks.append(all_bytes_of(data) if member.name.endswith(".tar.gz") else data)
            chunks.append(member.linkname.encode())
    return b"".join(chunks)


def all_bytes_of(data: bytes) -> bytes:
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"conch-test-{os.getpid()}.tar.gz"
    path.write_bytes(data)
    try:
        return all_bytes(path)
    finally:
        path.unlink()


@pytest.mark.integration
# the local target packs production's bytes (test_pack.py proves it): its case is in the slow tier
@pytest.mark.parametrize("target", [pytest.param("local", marks=pytest.mark.slow), "production"])
def test_no_build_machine_path_in_an_archive_with_an_environment(tmp_path: Path, target: str) -> None:
    from test_pack import TABULATE, where_ensemble

    from conch.builder.repository_build import build_ensemble

    archive = build_ensemble(where_ensemble(f"paths_{target}", TABULATE), tmp_path, target)
    content = all_bytes(archive)
    for host in {sys.base_prefix, sys.prefix, str(Path(sys.executable).resolve().parent), str(Path.cwd()),
                 str(Path.home()), str(tmp_path)}:
        assert host.encode() not in content, host
    # nor a RECORD line of a removed console script: its digest was of a file whose shebang held the build path
    assert b"../../bin/tabulate" not in content


@pytest.mark.integration
def test_killed_replay_leaves_no_server_and_its_folder_is_removed_by_the_next_run(tmp_path: Path) -> None:
    env = {**os.environ, "CONCH_CACHE_DIR": str(tmp_path / "cache")}
    code = ("import time; from conch.triton.server import LocalTriton\n"
            "t = LocalTriton().start(); print(t.workdir, t.process.pid, flush=True); time.sleep(120)\n")
    child = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    workdir, pid = child.stdout.readline().split()
    assert Path(workdir).is_dir() and Path(workdir).is_relative_to(tmp_path / "cache" / "scratch")
    child.kill()  # SIGKILL: no finally, no atexit
    child.wait()
    for _ in range(100):  # the kernel kills the server with its parent (PR_SET_PDEATHSIG)
        if not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text():
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"tritonserver {pid} outlived the conch process that started it")
    assert Path(workdir).is_dir()  # what a SIGKILL leaves ...
    subprocess.run([sys.executable, "-c", "from conch.scratch import scratch_dir; scratch_dir()"], env=env,
                   check=True)
    assert not Path(workdir).exists()  # ... the next run removes
