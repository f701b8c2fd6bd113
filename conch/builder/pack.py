"""Pack Python environments for Python-backend steps: conda-free (wheels fetched for the target's Python
and platform) or with conda-pack, into a content-addressed cache, laid out the way Triton finds them."""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from conch.archive.extract import safe_extract
from conch.archive.manifest import sha256
from conch.builder.archive import write_tar
from conch.cache import cache_dir, key_of, read_json, write_json
from conch.ensembles.environment import PythonEnv
from conch.errors import PackError
from conch.scratch import scratch_dir, scratch_temp

PLATFORM = "manylinux2014_x86_64"
LAYOUT_VERSION = "2"  # bump when the on-disk layout or the archive writer changes, to invalidate cached envs
# The Python-backend stubs of the releases conch targets are built against numpy 1 (numpy 2 loads, then
# crashes the stub on the first request; Triton server issue 8301, "known issues" of 2.51 and 2.52).
NUMPY_PIN = "numpy<2"
IMAGE_PYTHON_HOME = "/usr/bin"  # where the Triton images keep their Python
# Triton sources <env>/bin/activate up to 25.07; from 25.08 it sets PATH itself. Both find bin/python3
# first on PATH, and the stub takes sys.prefix (so site-packages) from it via pyvenv.cfg.
ACTIVATE = """# Written by conch: puts this environment's bin/ first on PATH for Triton's Python-backend stub.
_conch_env="$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")/.." && pwd)"
export PATH="$_conch_env/bin:$PATH"
export VIRTUAL_ENV="$_conch_env"
unset PYTHONHOME _conch_env
"""
Progress = Callable[[str], None]


@dataclass(frozen=True)
class PackedEnv:
    """A packed environment in the cache: a deterministic .tar.gz and the same tree unpacked."""

    key: str
    python: str
    archive: Path
    folder: Path
    pins: tuple[str, ...]
    from_cache: bool


def _quiet(message: str) -> None:
    return None


def pack(
    env: PythonEnv,
    python: str,
    *,
    home: str = IMAGE_PYTHON_HOME,
    progress: Progress | None = None,
    refresh: bool = False,
) -> PackedEnv:
    """The packed form of ``env`` for a stub of Python ``python`` (e.g. "3.10"), from cache if present.

    Requirements resolved before are not resolved again unless they change or ``refresh`` is set."""
    say = progress or _quiet
    if env.requirements:
        return _pack_requirements(env, python, home, say, refresh)
    if env.conda_prefix is not None:
        return _pack_conda(env, python, say)
    assert env.archive is not None
    return _adopt_archive(env, python, say)


# -- conda-free path ---------------------------------------------------------------------------------


def _pip(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "pip", *args, "--disable-pip-version-check", "--no-input"]
    # TMPDIR: pip's own pip-target-* folders land where a later run sweeps them if this one is killed
    env = {**os.environ, "PIP_NO_COLOR": "1", "TMPDIR": str(scratch_dir())}
    return subprocess.run(command, capture_output=True, text=True, env=env)


def _platform_args(python: str, target: Path) -> list[str]:
    return ["--target", str(target), "--only-binary=:all:", "--platform", PLATFORM,
            "--python-version", python, "--implementation", "cp"]


def resolve(
    requirements: tuple[str, ...], python: str, refresh: bool = False, progress: Progress | None = None
) -> tuple[str, ...]:
    """Exact ``name==version`` pins for the target, as resolved the last time these requirements were
    (kept in the cache), so builds do not ask the index again; ``refresh`` asks it and keeps the answer."""
    material: dict[str, object] = {"requirements": requirements, "python": python, "platform": PLATFORM,
                                   "numpy": NUMPY_PIN}
    where = cache_dir() / "resolved" / f"{_key(material)}.json"
    known = None if refresh else read_json(where)
    if isinstance(known, dict) and isinstance(known.get("pins"), list):
        return tuple(known["pins"])
    (progress or _quiet)(f"resolving {', '.join(requirements)} for CPython {python} ({PLATFORM})")
    pins = _resolve_with_pip(requirements, python)
    write_json(where, {"requirements": list(requirements), "python": python, "pins": list(pins)})
    return pins


@functools.lru_cache(maxsize=64)
def _resolve_with_pip(requirements: tuple[str, ...], python: str) -> tuple[str, ...]:
    """Ask pip (and so the index) which wheels it would install for the target (NumPy pinned < 2).

    Memoised per process: a --refresh build of many ensembles sharing an environment resolves it once."""
    with scratch_temp("conch-resolve-") as tmp:
        report = Path(tmp) / "report.json"
        result = _pip("install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report),
                      *_platform_args(python, Path(tmp) / "t"), *requirements, NUMPY_PIN)
        if result.returncode != 0:
            raise _explain_pip_failure(result.stderr, requirements, python)
        data = json.loads(report.read_text())
    pins = sorted(
        f"{item['metadata']['name'].lower().replace('_', '-')}=={item['metadata']['version']}"
        for item in data.get("install", [])
    )
    return tuple(pins)


def _explain_pip_failure(stderr: str, requirements: tuple[str, ...], python: str) -> PackError:
    """Turn pip's failure into a message that names the package and says what to do."""
    match = re.search(r"satisfies the requirement (\S+)", stderr)
    tail = "\n".join(line for line in stderr.strip().splitlines()[-6:])
    if match and "(from versions: none)" in stderr:
        name = match.group(1)
        with scratch_temp("conch-sdist-") as probe:
            has_sdist = _pip("download", "--no-deps", "--no-binary=:all:", "--quiet", "--dest", probe,
                             name).returncode == 0
        if has_sdist:
            return PackError(
                f"{name} has no wheel for CPython {python} on Linux x86-64, only a source distribution, which "
                f"conch will not compile for another platform. Use a version that ships {PLATFORM} wheels for "
                f"CPython {python}, or build the environment on a Linux host and give it as conda_prefix= or archive="
            )
        return PackError(f"no release of {name} exists for CPython {python} on Linux x86-64\n{tail}")
    return PackError(f"pip could not resolve {', '.join(requirements)} for CPython {python} on Linux x86-64:\n{tail}")


def _pack_requirements(env: PythonEnv, python: str, home: str, say: Progress, refresh: bool) -> PackedEnv:
    pins = resolve(env.requirements, python, refresh, say)
    key = _key({"kind": "pip", "pins": pins, "python": python, "platform": PLATFORM, "home": home})

    def produce(root: Path) -> None:
        say(f"downloading and installing {len(pins)} wheels: {', '.join(pins)}")
        site = root / "lib" / f"python{python}" / "site-packages"
        result = _pip("install", "--no-deps", "--no-compile", "--quiet", *_platform_args(python, site), *pins)
        if result.returncode != 0:
            raise _explain_pip_failure(result.stderr, pins, python)
        shutil.rmtree(site / "bin", ignore_errors=True)  # console scripts carry this host's shebang,
        for record in site.glob("*.dist-info/RECORD"):  # and RECORD their digests: the scripts' lines go with them
            lines = record.read_text().splitlines(keepends=True)
            record.write_text("".join(line for line in lines if not line.startswith("../../bin/")))
        _write_skeleton(root, python, home)

    return _publish(key, python, pins, produce, say)


def _write_skeleton(root: Path, python: str, home: str) -> None:
    bin_dir = root / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / "activate").write_text(ACTIVATE)
    # Never run: the stub only needs a `python3` on PATH inside the env to locate pyvenv.cfg.
    (bin_dir / "python3").write_bytes(b"")
    (bin_dir / "python3").chmod(0o755)
    # home: the image's Python, for the local target too (the same bytes as production's). The local stub finds
    # its standard library all the same: where home holds none of its version, Python falls back to the prefix
    # its libpython was built for, the interpreter the local server runs (docs/image-python.md).
    (root / "pyvenv.cfg").write_text(f"home = {home}\ninclude-system-site-packages = false\nversion = {python}\n")


# -- conda-pack path ---------------------------------------------------------------------------------


def conda_python(prefix: Path) -> str:
    """The Python minor version of a conda prefix (from conda-meta, else lib/python3.X)."""
    for meta in sorted((prefix / "conda-meta").glob("python-3.*.json")):
        match = re.match(r"python-(3\.\d+)", meta.name)
        if match:
            return match.group(1)
    found = sorted(p.name[len("python"):] for p in (prefix / "lib").glob("python3.*") if p.is_dir())
    if len(found) == 1:
        return found[0]
    raise PackError(f"cannot tell which Python the conda environment {prefix} holds (no conda-meta/python-*.json)")


def _pack_conda(env: PythonEnv, python: str, say: Progress) -> PackedEnv:
    prefix = env.conda_prefix
    assert prefix is not None
    if not (prefix / "conda-meta").is_dir():
        raise PackError(f"{prefix} is not a conda environment (no conda-meta/ folder); give its prefix path")
    found = conda_python(prefix)
    if found != python:
        raise PackError(
            f"conda environment {prefix} has Python {found}, but the target's Python-backend stub runs Python "
            f"{python}; create the environment with python={python} (or target a release whose stub is {found})"
        )
    try:
        import conda_pack
    except ImportError:
        raise PackError("packing a conda environment needs conda-pack: pip install conda-pack") from None
    meta = sorted(p.name for p in (prefix / "conda-meta").iterdir())
    history = prefix / "conda-meta" / "history"
    stamp = history.stat().st_mtime_ns if history.exists() else 0
    key = _key({"kind": "conda", "prefix": str(prefix.resolve()), "meta": meta, "history": stamp, "python": python})

    def produce(root: Path) -> None:
        say(f"packing conda environment {prefix} with conda-pack")
        with scratch_temp("conch-conda-pack-") as tmp:
            out = Path(tmp) / "env.tar.gz"
            try:
                conda_pack.pack(prefix=str(prefix), output=str(out), format="tar.gz", ignore_missing_files=True,
                                compress_level=1, n_threads=1, verbose=False, force=True)
            except conda_pack.CondaPackException as exc:
                raise PackError(f"conda-pack could not pack {prefix}: {exc}") from exc
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                # conda-pack reads every conda-meta/*.json record and trusts its fields
                raise PackError(
                    f"conda-pack could not read the package records of {prefix} ({type(exc).__name__}: {exc}); "
                    f"a conda-meta/*.json file is damaged: recreate the environment, or reinstall the package "
                    f"it names") from exc
            # conda-pack stamps one file with the current time and mode 0600: unpack it here and let
            # _publish repack it deterministically.
            with tarfile.open(out) as tar:
                tar.extractall(root, filter="tar")

    return _publish(key, python, tuple(meta), produce, say)


# -- an environment packed elsewhere -----------------------------------------------------------------


def _adopt_archive(env: PythonEnv, python: str, say: Progress) -> PackedEnv:
    source = env.archive
    assert source is not None
    if not source.exists():
        raise PackError(f"packed environment {source} does not exist")
    digest = _key({"kind": "archive", "sha": sha256(source) if source.is_file() else _folder_listing(source)})

    def produce(root: Path) -> None:
        say(f"adopting packed environment {source}")
        if source.is_dir():
            shutil.copytree(source, root, symlinks=True, dirs_exist_ok=True)
        else:
            safe_extract(source, root)  # a user's archive: unpacked under the same rules as an MME archive
        if not (root / "bin" / "activate").is_file():
            raise PackError(
                f"{source}: no bin/activate at the environment root; Triton needs the environment's bin/ and "
                "lib/ at the archive root (pack the environment's contents, not a folder holding it)"
            )
        versions = sorted(p.name[len("python"):] for p in (root / "lib").glob("python3.*"))
        if versions and python not in versions:
            raise PackError(
                f"{source} holds Python {', '.join(versions)}, but the target's stub runs Python {python}"
            )

    return _publish(digest, python, (), produce, say)


def _folder_listing(folder: Path) -> list[object]:
    """A folder's content as its files' paths, sizes, ns mtimes and ctimes (and links' targets): an adopted
    environment folder changed in place is packed again."""
    found: list[object] = [str(folder.resolve())]
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(root, name)
            st = os.lstat(path)
            found.append([os.path.relpath(path, folder), st.st_size, st.st_mtime_ns, st.st_ctime_ns,
                          os.readlink(path) if os.path.islink(path) else None])
    return found


# -- cache ---------------------------------------------------------------------------------------------


def _key(material: dict[str, object]) -> str:
    """The cache key of a packed environment or a resolution: ``material`` (what it is made from), the code
    that packs it (this module and the archive writer) and pip's version."""
    return key_of({**material, "layout": LAYOUT_VERSION, "packer": _packer()})[:24]


@functools.cache
def _packer() -> list[str]:
    """What packs an environment besides its pins: this module's and the archive writer's code, and pip."""
    from importlib import metadata

    from conch.builder import archive

    try:
        pip = metadata.version("pip")
    except metadata.PackageNotFoundError:
        pip = None
    return [sha256(Path(__file__)), sha256(Path(archive.__file__)), str(pip)]


def _publish(key: str, python: str, pins: tuple[str, ...], produce: Callable[[Path], None], say: Progress) -> PackedEnv:
    final = cache_dir() / "envs" / key
    archive, folder = final / "env.tar.gz", final / "env"
    if archive.is_file() and folder.is_dir():
        say(f"environment {key[:12]} from cache")
        return PackedEnv(key, python, archive, folder, pins, True)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=final.parent))
    try:
        produce(tmp / "env")
        say(f"packing environment {key[:12]}")
        with (tmp / "env.tar.gz").open("wb") as fh:
            write_tar({"": tmp / "env"}, fh)
        (tmp / "pins.json").write_text(json.dumps({"python": python, "pins": list(pins)}, indent=1) + "\n")
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return PackedEnv(key, python, archive, folder, pins, False)
