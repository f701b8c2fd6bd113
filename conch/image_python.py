"""The Python that a release's Triton image runs Python-backend models with: the modules it provides (its
standard library, and the few packages the image installs) and an interpreter of its version on this machine.
Sources: server ``build.py`` (python_backend's image stage) per release; docs/fidelity.md, "The image's Python"."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from conch.cache import cache_dir, key_of
from conch.ensembles.target import Release
from conch.errors import ServeError

# The Python backend's own modules: its folder is on the stub's sys.path (python_backend src/pb_stub.cc)
BACKEND_MODULES = ("triton_python_backend_utils", "c_python_backend_utils")
# Top-level modules each requirement of image_requirements installs (virtualenv brings distlib, filelock and
# platformdirs; setuptools its distutils-precedence.pth, so `distutils` imports on 3.12 too)
MODULES_OF = {"pip": ("pip",), "setuptools": ("setuptools", "_distutils_hack", "pkg_resources", "distutils"),
              "wheel": ("wheel",), "numpy<2": ("numpy",),
              "virtualenv": ("virtualenv", "distlib", "filelock", "platformdirs")}


def image_requirements(release: Release) -> tuple[str, ...]:
    """What python_backend's stage of the release's image installs into its Python (server ``build.py``, at the
    release's branch; the table in docs/image-python.md). numpy is pinned below 2 for every release here:
    releases before 24.06 took the newest numpy of their day (1.x), and the local stubs (2.51) crash on 2."""
    packages = ["pip", "setuptools", "wheel", "numpy<2"]
    if not release < Release(24, 4):
        packages.append("virtualenv")
    return tuple(packages)


def image_packages(release: Release | str) -> frozenset[str]:
    """Top-level module names the release's image Python holds beyond its standard library."""
    required = image_requirements(Release.of(release))
    return frozenset(m for r in required for m in MODULES_OF[r]) | frozenset(BACKEND_MODULES)


@functools.cache
def stdlib_modules(python: str) -> frozenset[str]:
    """Top-level module names of the standard library of Python ``python`` ("3.10"), from stdlib-list (its lists
    are each version's ``sys.stdlib_module_names``)."""
    from stdlib_list import stdlib_list

    return frozenset(name.split(".")[0] for name in stdlib_list(python))


def stdlib_since(module: str, python: str) -> str | None:
    """The first Python after ``python`` whose standard library has ``module`` (None: none conch knows of)."""
    from stdlib_list import short_versions

    major, minor = (int(p) for p in python.split("."))
    later = sorted(tuple(int(p) for p in v.split(".")) for v in short_versions if v.startswith("3."))
    for version in later:
        if version > (major, minor) and module in stdlib_modules(f"{version[0]}.{version[1]}"):
            return f"{version[0]}.{version[1]}"
    return None


def requirement_of(module: str) -> str:
    """The distribution installed here that provides ``module`` (PyYAML for yaml), as a requirement string."""
    from importlib.metadata import packages_distributions

    found = packages_distributions().get(module)
    return f'"{found[0]}"' if found else f'"<the package of {module}>"'


INTERPRETER_ENV = "CONCH_PYTHON_"  # CONCH_PYTHON_3_10=/path/to/python3.10: the interpreter of that version to use
PROBE = ("import json, sys, sysconfig; print(json.dumps([sys.version_info[0], sys.version_info[1],"
         " sys.version.split()[0], sys.executable, sysconfig.get_config_var('LIBDIR'),"
         " sysconfig.get_config_var('INSTSONAME'),"
         " bool(sysconfig.get_config_var('Py_ENABLE_SHARED'))]))")

@dataclass(frozen=True)
class Interpreter:
    """A CPython found on this machine, with the shared libpython the stub links."""

    executable: Path
    version: str  # "3.10"
    full_version: str  # "3.10.13"
    libdir: Path
    found_by: str  # how it was found: "--python", "CONCH_PYTHON_3_10", "pyenv", "uv", "conda", "PATH", "conch's"


@functools.lru_cache(maxsize=64)
def probe(executable: str, found_by: str) -> Interpreter | None:
    """The interpreter at ``executable`` when it runs and has a shared libpython (the stub needs one)."""
    try:
        out = subprocess.run([executable, "-I", "-c", PROBE], capture_output=True, text=True, timeout=30, check=True)
        major, minor, full, real, libdir, soname, shared = json.loads(out.stdout)
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    if not shared or not libdir or not soname or not (Path(libdir) / soname).is_file():
        return None
    return Interpreter(Path(real), f"{major}.{minor}", full, Path(libdir), found_by)


def _version_key(path: Path) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", path.name)[:3])


def _candidates(version: str) -> Iterator[tuple[str, str]]:
    """(executable, how found) in the order users keep interpreters: the environment variable (which ``--python``
    sets), pyenv, uv's managed Pythons, conda environments, ``pythonX.Y`` on PATH, and conch's own Python."""
    given = os.environ.get(INTERPRETER_ENV + version.replace(".", "_"))
    if given:
        yield given, INTERPRETER_ENV + version.replace(".", "_")
    pattern = re.compile(rf"^{re.escape(version)}\.\d+$")
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    if pyenv.is_dir():
        for folder in sorted((p for p in pyenv.iterdir() if pattern.match(p.name)), key=_version_key, reverse=True):
            yield str(folder / "bin" / f"python{version}"), "pyenv"
    uv = Path(os.environ.get("UV_PYTHON_INSTALL_DIR") or Path.home() / ".local" / "share" / "uv" / "python")
    if uv.is_dir():
        uv_pattern = re.compile(rf"^cpython-{re.escape(version)}\.\d+-linux-x86_64-gnu$")
        for folder in sorted((p for p in uv.iterdir() if uv_pattern.match(p.name)), key=_version_key, reverse=True):
            yield str(folder / "bin" / f"python{version}"), "uv"
    for prefix in _conda_prefixes():
        yield str(prefix / "bin" / f"python{version}"), "conda"
    on_path = shutil.which(f"python{version}")
    if on_path:
        yield on_path, "PATH"
    if f"{sys.version_info.major}.{sys.version_info.minor}" == version:
        yield sys.executable, "conch's"


def _conda_prefixes() -> list[Path]:
    """conda's environments: the ones conda lists in ``~/.conda/environments.txt``, and ``$CONDA_PREFIX``."""
    found: list[Path] = []
    listed = Path.home() / ".conda" / "environments.txt"
    with contextlib.suppress(OSError):
        found.extend(Path(line.strip()) for line in listed.read_text().splitlines() if line.strip())
    if os.environ.get("CONDA_PREFIX"):
        found.append(Path(os.environ["CONDA_PREFIX"]))
    return list(dict.fromkeys(found))


def find_interpreter(version: str) -> Interpreter | None:
    """The first interpreter of Python ``version`` (e.g. "3.10") with a shared libpython, or None."""
    for executable, how in _candidates(version):
        if not os.path.isfile(executable):
            continue
        found = probe(executable, how)
        if found is not None and found.version == version:
            return found
    return None


def other_python(ran: str, wanted: str, images: str) -> str:
    """What every result of a run on another Python than the image's says: ``ran on 3.11; the 24.10 image runs
    3.10 (no Python 3.10 found: ...)``."""
    return (f"ran on {ran}; the {images} image runs {wanted} (no Python {wanted} found: install one with pyenv, "
            f"uv or conda, or give --python PATH or {INTERPRETER_ENV}{wanted.replace('.', '_')})")


def given_interpreter(path: Path) -> Interpreter:
    """``--python PATH``: the interpreter there, made the one its version uses (through ``CONCH_PYTHON_X_Y``, so
    the servers this process and its children start use it); ServeError when it cannot run the stub."""
    found = probe(str(path), "--python")
    if found is None:
        raise ServeError(f"--python {path}: not a CPython with a shared libpython (the Python-backend stub links "
                         "libpython3.X.so); give an interpreter built with --enable-shared (pyenv, uv, conda and "
                         "the distributions' own are)")
    os.environ[INTERPRETER_ENV + found.version.replace(".", "_")] = str(path)
    return found


def host_interpreter() -> Interpreter:
    """conch's own Python: what the stub runs on when the release's Python is not found."""
    found = probe(sys.executable, "conch's")
    if found is None:
        raise ServeError(f"conch's Python {sys.executable} has no shared libpython, so the local Python-backend "
                         "stub cannot run on it; install an interpreter of the release's Python (pyenv, uv, conda)")
    return found


PLATFORM = "manylinux2014_x86_64"  # the wheels of the image environment (as the packer's)
IMAGE_PYTHON_DIR_ENV = "CONCH_IMAGE_PYTHON_DIR"  # where image environments are kept (default <cache>/image-python)


def image_environment(interpreter: Interpreter, packages: tuple[str, ...]) -> Path:
    """A venv of ``interpreter`` holding ``packages`` (and not the interpreter's own site-packages), built once in
    ``<cache>/image-python/`` (or ``$CONCH_IMAGE_PYTHON_DIR``) under a key of what it holds and published whole."""
    stat = interpreter.executable.stat()
    key = key_of([str(interpreter.executable), interpreter.full_version, stat.st_size, stat.st_mtime_ns,
                  list(packages), PLATFORM])[:20]
    root = Path(os.environ.get(IMAGE_PYTHON_DIR_ENV) or cache_dir() / "image-python")
    final = root / f"py{interpreter.version}-{key}"
    if (final / "pins.json").is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    # one process builds it, the others (parallel builds, test workers, a replay beside a build) wait and take it
    with (final.parent / f".{final.name}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (final / "pins.json").is_file():
            return final
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
        try:
            _build_environment(interpreter, packages, tmp / "env")
            os.replace(tmp / "env", final)
        except OSError:
            if not (final / "pins.json").is_file():  # published meanwhile by a process that took no lock is fine
                raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def _build_environment(interpreter: Interpreter, packages: tuple[str, ...], root: Path) -> None:
    made = subprocess.run([str(interpreter.executable), "-m", "venv", "--without-pip", str(root)],
                          capture_output=True, text=True)
    if made.returncode != 0:
        raise ServeError(f"could not make a venv of {interpreter.executable}: {made.stderr.strip()[-400:]}")
    site = root / "lib" / f"python{interpreter.version}" / "site-packages"
    # conch's pip fetches the wheels for that Python, as the packer does for a step's environment
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-input",
               "--no-compile", "--target", str(site), "--only-binary=:all:", "--platform", PLATFORM,
               "--python-version", interpreter.version, "--implementation", "cp", *packages]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise ServeError(f"could not install the image's Python packages ({', '.join(packages)}) for Python "
                         f"{interpreter.version}:\n{done.stderr.strip()[-800:]}")
    shutil.rmtree(site / "bin", ignore_errors=True)  # console scripts with conch's shebang: the image has its own
    pins = sorted(p.name.removesuffix(".dist-info") for p in site.glob("*.dist-info"))
    (root / "pins.json").write_text(json.dumps({"python": interpreter.full_version, "interpreter":
                                                str(interpreter.executable), "packages": list(packages),
                                                "pins": pins}, indent=1) + "\n")


STRICT_ENV = "CONCH_STRICT_PYTHON"  # set by --strict: this process and its children refuse another Python


def strict_default() -> bool:
    """Whether a run on another Python than the image's fails: in CI (``CI=true``), or after ``--strict``."""
    return any(os.environ.get(name, "").lower() in ("1", "true", "yes") for name in ("CI", STRICT_ENV))
