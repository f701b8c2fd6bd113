"""Packing environments for real (wheels from PyPI, conda-pack) and loading them in the real
tritonserver: the step imports a package the server's own Python does not have."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import env_steps
import numpy as np
import pytest

from conch import BuildError, Ensemble, PackError, PythonEnv, PythonStep, Tensor
from conch.builder.pack import pack, resolve
from conch.builder.repository_build import build_ensemble, render_repository
from conch.ensembles.target import DEFAULT_RELEASE, Release
from conch.image_python import find_interpreter
from conch.replays.local_replay import stage
from conch.triton.mme import MultiModelClient
from conch.triton.server import LocalTriton

pytestmark = pytest.mark.integration

TABULATE = PythonEnv(requirements=("tabulate==0.9.0",))
STUB = Release.of(DEFAULT_RELEASE).stub_python  # what the local server's stub runs, and local archives pack for


def test_the_server_python_lacks_the_package() -> None:
    with pytest.raises(ImportError, match="No module named 'tabulate'"):
        __import__("tabulate")


def where_ensemble(name: str, env: PythonEnv, steps: int = 1) -> Ensemble:
    ens = Ensemble(name, max_batch_size=4)
    x = ens.input("X", "FP32", [1])
    for i in range(steps):
        step = PythonStep(f"where{i}", env_steps.where, inputs=[Tensor("x", "FP32", [1])],
                          outputs=[Tensor("WHERE", "BYTES", [3])],
                          max_batch_size=4, env=env)
        ens.output(f"WHERE{i}", step(x))
    return ens


def load_and_ask(server: LocalTriton, archive: Path) -> list[str]:
    folder = stage(archive, server)
    client = MultiModelClient(server.sagemaker_url, server.http_url)
    client.load(archive.name, folder, timeout=120)
    out = client.invoke_binary(archive.name, {"X": np.ones((1, 1), np.float32)})
    return [v.decode() for v in out["WHERE0"][0]]


@pytest.mark.parametrize("unpacked", [False, True], ids=["tar.gz", "folder"])
def test_conda_free_env_loads_and_answers(unpacked: bool, tmp_path: Path, triton: LocalTriton) -> None:
    env = PythonEnv(requirements=("tabulate==0.9.0",), unpacked=unpacked)
    archive = build_ensemble(where_ensemble(f"where_{int(unpacked)}", env), tmp_path, "local")
    tabulate_file, prefix, numpy_file = load_and_ask(triton, archive)
    assert tabulate_file.startswith(prefix) and numpy_file.startswith(prefix)
    assert f"lib/python{STUB}/site-packages" in tabulate_file
    assert sys.prefix not in prefix
    if unpacked:
        assert "/conch-envs/env-" in prefix  # used in place, not extracted
    else:
        assert "python_env_" in prefix  # the backend unpacked the .tar.gz


def test_steps_with_equal_envs_share_one_copy() -> None:
    repo = render_repository(where_ensemble("shared", TABULATE, steps=2), "local", "24.10")
    envs = [n for n in repo.files if n.startswith("conch-envs/")]
    assert len(envs) == 1 and envs[0].endswith(".tar.gz")
    configs = [repo.files[f"shared__where{i}/config.pbtxt"] for i in range(2)]
    for config in configs:
        assert f"$$TRITON_MODEL_DIRECTORY/../{envs[0]}".encode() in config  # type: ignore[operator]
    (record,) = repo.manifest["environments"].values()
    assert "tabulate==0.9.0" in record["pins"] and any(p.startswith("numpy==1.") for p in record["pins"])


def test_production_env_is_packed_for_the_release_python() -> None:
    repo = render_repository(where_ensemble("prod", TABULATE), "production", "24.10")
    (rel,) = [n for n in repo.files if n.startswith("conch-envs/")]
    with tarfile.open(repo.files[rel]) as tar:  # type: ignore[arg-type]
        names = tar.getnames()
        pyvenv = tar.extractfile("pyvenv.cfg").read().decode()  # type: ignore[union-attr]
    assert "bin/activate" in names and "bin/python3" in names
    assert any(n.startswith("lib/python3.10/site-packages/tabulate") for n in names)
    assert "home = /usr/bin" in pyvenv and not any("/bin/tabulate" in n for n in names)


def test_the_local_target_packs_the_bytes_production_ships(local_index: str, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """An env= packed for the local target is production's archive member, byte for byte (its pyvenv.cfg names
    the image's /usr/bin, its bin/activate is production's), each packed from a cold cache of its own."""
    env = PythonEnv(requirements=("conch-fixture-wheel==1.0",))
    members = {}
    for target in ("local", "production"):
        monkeypatch.setenv("CONCH_CACHE_DIR", str(tmp_path / target))
        repo = render_repository(where_ensemble("same", env), target, "24.10")
        members[target] = {n: Path(str(f)).read_bytes() for n, f in repo.files.items() if n.startswith("conch-envs/")}
    assert len(members["local"]) == 1 and members["local"] == members["production"]
    (data,) = members["local"].values()
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        pyvenv = tar.extractfile("pyvenv.cfg").read().decode()  # type: ignore[union-attr]
        activate = tar.extractfile("bin/activate").read().decode()  # type: ignore[union-attr]
    assert pyvenv.startswith("home = /usr/bin\n") and "pyvenv.cfg" not in activate


def test_second_pack_comes_from_the_cache_and_is_identical(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONCH_CACHE_DIR", str(tmp_path / "cache"))
    messages: list[str] = []
    first = pack(TABULATE, "3.12", progress=messages.append)
    packed, written = first.archive.read_bytes(), first.archive.stat().st_mtime_ns
    second = pack(TABULATE, "3.12", progress=messages.append)
    assert not first.from_cache and second.from_cache and first.key == second.key
    # the hit hands back the file the first pack wrote, untouched, not a fresh pack under the same name
    assert second.archive.stat().st_mtime_ns == written and second.archive.read_bytes() == packed
    assert sum(m.startswith("resolving") for m in messages) == 1
    assert any(m.startswith("resolving") for m in messages) and any(m.startswith("downloading") for m in messages)
    assert any("from cache" in m for m in messages)


def test_sdist_only_package_is_refused_with_the_reason(local_index: str) -> None:
    with pytest.raises(PackError, match=r"conch-fixture-sdist==1.0 has no wheel for CPython 3.10 on Linux x86-64, "
                                        r"only a source distribution, which conch will not compile"):
        resolve(("conch-fixture-sdist==1.0",), "3.10", refresh=True)


def test_unknown_package_is_refused(local_index: str) -> None:
    # the index answers (a wheel it holds resolves), so "unknown" means unknown
    assert "conch-fixture-wheel==1.0" in resolve(("conch-fixture-wheel==1.0",), "3.10", refresh=True)
    with pytest.raises(PackError, match=r"no release of conch-no-such-package-xyz==1.0 exists for CPython 3.10 on "
                                        r"Linux x86-64"):
        resolve(("conch-no-such-package-xyz==1.0",), "3.10", refresh=True)


def make_conda_prefix(root: Path, python: str, packages: tuple[str, ...] = ("tabulate==0.9.0", "numpy<2")) -> Path:
    """A prefix conda-pack accepts (conda-meta/history), from a real pip installation of the packages (with
    none, one small module written here: a prefix to pack, not to load)."""
    site = root / "lib" / f"python{python}" / "site-packages"
    if packages:
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--target", str(site),
                        "--only-binary=:all:", "--platform", "manylinux2014_x86_64", "--python-version", python,
                        "--implementation", "cp", *packages], check=True)
    else:
        site.mkdir(parents=True)
        (site / "small.py").write_text("ANSWER = 42\n")
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "python3").write_bytes(b"")
    (root / "bin" / "python3").chmod(0o755)
    found = find_interpreter(python)  # the stub's interpreter: the prefix's Python is its version
    base = found.executable.parent if found else Path(sys.executable).resolve().parent
    (root / "pyvenv.cfg").write_text(f"home = {base}\ninclude-system-site-packages = false\n")
    (root / "conda-meta").mkdir()
    (root / "conda-meta" / "history").write_text("==> 2024-01-01 00:00:00 <==\n")
    return root


def test_conda_pack_path_loads_and_answers(tmp_path: Path, triton: LocalTriton) -> None:
    prefix = make_conda_prefix(tmp_path / "condaenv", STUB)
    assert not (prefix / "bin" / "activate").exists()  # conda-pack must add it
    env = PythonEnv(conda_prefix=prefix)
    archive = build_ensemble(where_ensemble("conda_where", env), tmp_path / "dist", "local")
    tabulate_file, prefix_seen, _ = load_and_ask(triton, archive)
    assert tabulate_file.startswith(prefix_seen) and "python_env_" in prefix_seen
    with tarfile.open(archive) as outer:
        (member,) = [m for m in outer.getmembers() if m.name.startswith("conch-envs/")]
        assert member.mode == 0o644
        inner = outer.extractfile(member)
        assert inner is not None
        with tarfile.open(fileobj=inner) as env_tar:
            assert {"bin/activate", "bin/conda-unpack"} <= set(env_tar.getnames())


def test_a_conda_env_packed_again_from_a_cold_cache_is_the_same_bytes(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """conda-pack stamps a file it writes with the current time and mode 0600: conch repacks its output, so a
    second pack from an empty cache (conda-pack run again, a second later) builds the same archive. A prefix
    of one small module: what conda-pack adds and stamps is the same for any prefix, and packing numpy twice
    took half a minute (the slow tier packs the loadable prefix twice, in two processes)."""
    prefix = make_conda_prefix(tmp_path / "condaenv", STUB, packages=())
    env = PythonEnv(conda_prefix=prefix)
    built = []
    for run in ("a", "b"):
        monkeypatch.setenv("CONCH_CACHE_DIR", str(tmp_path / f"cache-{run}"))
        messages: list[str] = []
        started = time.time()
        built.append(build_ensemble(where_ensemble("conda_small", env), tmp_path / run, "local",
                                    progress=messages.append))
        assert any(m.startswith("packing conda environment") for m in messages), messages  # cold: conda-pack ran
        if run == "a":  # the second conda-pack's clock is a second later
            time.sleep(max(0.0, 1.05 - (time.time() - started)))
    with tarfile.open(built[0]) as outer:
        (member,) = [m for m in outer.getmembers() if m.name.startswith("conch-envs/")]
        inner = outer.extractfile(member)
        assert inner is not None
        with tarfile.open(fileobj=inner) as env_tar:
            assert {"bin/activate", "bin/conda-unpack", "lib/python" + STUB + "/site-packages/small.py"} \
                <= set(env_tar.getnames())
    assert built[0].read_bytes() == built[1].read_bytes()


def test_conda_env_of_another_python_is_refused_before_packing(tmp_path: Path) -> None:
    prefix = tmp_path / "py38"
    (prefix / "conda-meta").mkdir(parents=True)
    (prefix / "lib" / "python3.8").mkdir(parents=True)
    env = PythonEnv(conda_prefix=prefix)
    with pytest.raises(PackError, match=r"has Python 3.8, but the target's Python-backend stub runs Python 3.10"):
        render_repository(where_ensemble("old", env), "production", "24.10")


def test_not_a_conda_env(tmp_path: Path) -> None:
    with pytest.raises(PackError, match="is not a conda environment"):
        pack(PythonEnv(conda_prefix=tmp_path), "3.10")


def _tar_gz(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_an_adopted_archive_needs_the_env_root_at_its_root(tmp_path: Path) -> None:
    wrapped = _tar_gz(tmp_path / "wrapped.tar.gz", {"env/bin/activate": b"", "env/lib/python3.10/site-packages/x": b""})
    with pytest.raises(PackError, match=r"wrapped.tar.gz: no bin/activate at the environment root; Triton needs the "
                                        r"environment's bin/ and lib/ at the archive root"):
        pack(PythonEnv(archive=wrapped), "3.10")


def test_an_adopted_archive_of_another_python_is_refused(tmp_path: Path) -> None:
    old = _tar_gz(tmp_path / "old.tar.gz", {"bin/activate": b"", "lib/python3.8/site-packages/x": b""})
    with pytest.raises(PackError, match=r"old.tar.gz holds Python 3.8, but the target's stub runs Python 3.10"):
        pack(PythonEnv(archive=old), "3.10")
    with pytest.raises(PackError, match=r"packed environment .*absent.tar.gz does not exist"):
        pack(PythonEnv(archive=tmp_path / "absent.tar.gz"), "3.10")


@pytest.mark.parametrize("as_folder", [False, True], ids=["tar.gz", "folder"])
def test_an_adopted_archive_loads_and_answers(as_folder: bool, tmp_path: Path, triton: LocalTriton) -> None:
    packed = pack(TABULATE, STUB)  # packed "elsewhere": handed over as a file or folder
    env = PythonEnv(archive=packed.folder if as_folder else packed.archive)
    archive = build_ensemble(where_ensemble(f"adopted_{int(as_folder)}", env), tmp_path, "local")
    tabulate_file, prefix, _ = load_and_ask(triton, archive)
    assert tabulate_file.startswith(prefix) and "python_env_" in prefix
    assert f"lib/python{STUB}/site-packages/tabulate" in tabulate_file


def test_an_unpacked_environment_needs_release_23_07() -> None:
    env = PythonEnv(requirements=("tabulate==0.9.0",), unpacked=True)
    with pytest.raises(BuildError, match=r"model 'early__where0': an unpacked environment needs release 23.07 or "
                                         r"later \(target is 23.05\); use unpacked=False"):
        render_repository(where_ensemble("early", env), "production", "23.05")
    repo = render_repository(where_ensemble("early", env), "production", "23.07")
    assert any(n.startswith("conch-envs/env-") and not n.endswith(".tar.gz") for n in repo.files)


ENVS_FILE = """
from pathlib import Path

import env_steps

from conch import Ensemble, PythonEnv, PythonStep, Tensor


def where(name, env):
    ens = Ensemble(name, max_batch_size=4)
    step = PythonStep("where0", env_steps.where, inputs=[Tensor("x", "FP32", [1])],
                      outputs=[Tensor("WHERE", "BYTES", [3])],
                      max_batch_size=4, env=env)
    ens.output("WHERE0", step(ens.input("X", "FP32", [1])))
    return ens


conda_where = where("conda_where", PythonEnv(conda_prefix=Path({prefix!r})))
pip_where = where("pip_where", PythonEnv(requirements=("tabulate==0.9.0",)))
"""


@pytest.mark.slow  # ~2 min: two cold packs of each environment
def test_packed_environments_are_byte_identical_across_processes_with_cold_caches(tmp_path: Path) -> None:
    """conda-pack's output and a conda-free environment, each packed by its own `conch build` process from
    an empty cache: the archives (and the environments inside) are the same bytes."""
    prefix = make_conda_prefix(tmp_path / "condaenv", "3.10")
    (tmp_path / "envs.py").write_text(ENVS_FILE.format(prefix=str(prefix)))
    fixtures = Path(env_steps.__file__).parent
    for run in ("a", "b"):
        env = {**os.environ, "CONCH_CACHE_DIR": str(tmp_path / f"cache-{run}"),
               "PYTHONPATH": os.pathsep.join([str(fixtures), os.environ.get("PYTHONPATH", "")])}
        result = subprocess.run([sys.executable, "-m", "conch.cli", "build", str(tmp_path / "envs.py"), "--out",
                                 str(tmp_path / run)], capture_output=True, text=True, timeout=600, env=env)
        assert result.returncode == 0, result.stderr
        assert "packing conda environment" in result.stderr and "resolving" in result.stderr  # cold, both
    for name in ("conda_where.tar.gz", "pip_where.tar.gz"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
