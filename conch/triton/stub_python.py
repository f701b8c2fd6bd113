"""The Python a local tritonserver runs its Python-backend stub on: the release's image Python (3.10 up to
24.10, 3.12 from 24.11), found where users keep interpreters, with an environment that holds what the image's
Python holds and nothing else (server ``build.py``; docs/image-python.md). Where no interpreter of that
version is found, the host's runs instead and says so (``StubPython.note``): the local proof is never kinder
than production without saying it."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from conch.cache import cache_dir, key_of
from conch.ensembles.target import DEFAULT_RELEASE, Release
from conch.errors import ServeError

ENV_PREFIX = "CONCH_PYTHON_"  # CONCH_PYTHON_3_10=/path/to/python3.10: the interpreter of that version to use
PROBE = ("import json, sys, sysconfig; print(json.dumps([sys.version_info[0], sys.version_info[1],"
         " sys.version.split()[0], sys.executable, sysconfig.get_config_var('LIBDIR'),"
         " sysconfig.get_config_var('INSTSONAME'),"
         " bool(sysconfig.get_config_var('Py_ENABLE_SHARED'))]))")
PLATFORM = "manylinux2014_x86_64"


def image_packages(release: Release) -> tuple[str, ...]:
    """What python_backend's stage of the release's image installs into its Python (server ``build.py``, at the
    release's branch; the table in docs/image-python.md). numpy is pinned below 2 for every release here:
    releases before 24.06 took the newest numpy of their day (1.x), and the local stubs (2.51) crash on 2."""
    packages = ["pip", "setuptools", "wheel", "numpy<2"]
    if not release < Release(24, 4):
        packages.append("virtualenv")
    return tuple(packages)


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
    given = os.environ.get(ENV_PREFIX + version.replace(".", "_"))
    if given:
        yield given, ENV_PREFIX + version.replace(".", "_")
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


def given_interpreter(path: Path) -> Interpreter:
    """``--python PATH``: the interpreter there, made the one its version uses (through ``CONCH_PYTHON_X_Y``, so
    the servers this process and its children start use it); ServeError when it cannot run the stub."""
    found = probe(str(path), "--python")
    if found is None:
        raise ServeError(f"--python {path}: not a CPython with a shared libpython (the Python-backend stub links "
                         "libpython3.X.so); give an interpreter built with --enable-shared (pyenv, uv, conda and "
                         "the distributions' own are)")
    os.environ[ENV_PREFIX + found.version.replace(".", "_")] = str(path)
    return found


def host_interpreter() -> Interpreter:
    """conch's own Python: what the stub runs on when the release's Python is not found."""
    found = probe(sys.executable, "conch's")
    if found is None:
        raise ServeError(f"conch's Python {sys.executable} has no shared libpython, so the local Python-backend "
                         "stub cannot run on it; install an interpreter of the release's Python (pyenv, uv, conda)")
    return found


@dataclass(frozen=True)
class StubPython:
    """What one local server's Python-backend stubs run on: an interpreter and the image's packages."""

    wanted: str  # the releases' Python, e.g. "3.10"
    releases: tuple[str, ...]  # the releases whose archives this server serves
    interpreter: Interpreter
    environment: Path  # a venv of ``interpreter`` holding only the image's packages

    @property
    def version(self) -> str:
        return self.interpreter.version

    @property
    def faithful(self) -> bool:
        """Whether the stub runs the Python the releases' images run."""
        return self.interpreter.version == self.wanted

    @property
    def note(self) -> str:
        """Empty when faithful; else what every result says: ``ran on 3.11; the 24.10 image runs 3.10``."""
        if self.faithful:
            return ""
        images = ", ".join(self.releases) or DEFAULT_RELEASE
        return (f"ran on {self.version}; the {images} image runs {self.wanted} (no Python {self.wanted} found: "
                f"install one with pyenv, uv or conda, or give --python PATH or {ENV_PREFIX}"
                f"{self.wanted.replace('.', '_')})")

    def describe(self) -> str:
        """One line for a log or a summary."""
        where = f"Python {self.interpreter.full_version} ({self.interpreter.found_by}: {self.interpreter.executable})"
        return f"Python-backend stub on {where}, image packages only" + (f"; {self.note}" if self.note else "")


def stub_python(releases: Iterable[str | Release] = (), strict: bool = False) -> StubPython:
    """The stub's Python for archives of these releases (which must share one image Python; none given: the
    default release's), its environment built once in conch's cache. Where that Python is not found, conch's
    own runs instead, with a warning, or a ServeError when ``strict``."""
    chosen = sorted({str(r) for r in releases}, key=Release.of) or [DEFAULT_RELEASE]
    versions = {Release.of(r).stub_python for r in chosen}
    if len(versions) > 1:
        raise ServeError(f"releases {', '.join(chosen)} run Python-backend steps on Pythons "
                         f"{', '.join(sorted(versions))}; one local server runs one: load them on separate servers")
    (wanted,) = versions
    interpreter = find_interpreter(wanted) or host_interpreter()
    packages = sorted({p for r in chosen for p in image_packages(Release.of(r))})
    stub = StubPython(wanted, tuple(chosen), interpreter, image_environment(interpreter, tuple(packages)))
    if stub.note and strict:
        raise ServeError(f"the Python-backend stub {stub.note}; --strict (and CI) refuse to run on another Python "
                         "than the image's")
    if stub.note:
        warnings.warn(f"conch: the Python-backend stub {stub.note}", RuntimeWarning, stacklevel=2)
    return stub


def group_by_python(releases: dict[str, str]) -> dict[str, list[str]]:
    """Items (e.g. archive paths) grouped by the stub Python of their release: ``{python: [item, ...]}``."""
    groups: dict[str, list[str]] = {}
    for item, release in releases.items():
        groups.setdefault(Release.of(release).stub_python, []).append(item)
    return groups


def image_environment(interpreter: Interpreter, packages: tuple[str, ...]) -> Path:
    """A venv of ``interpreter`` holding ``packages`` (and not the interpreter's own site-packages), built once in
    ``<cache>/image-python/`` under a key of what it holds and published whole."""
    stat = interpreter.executable.stat()
    key = key_of([str(interpreter.executable), interpreter.full_version, stat.st_size, stat.st_mtime_ns,
                  list(packages), PLATFORM])[:20]
    final = cache_dir() / "image-python" / f"py{interpreter.version}-{key}"
    if (final / "pins.json").is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    try:
        _build_environment(interpreter, packages, tmp / "env")
        os.replace(tmp / "env", final)
    except OSError:
        if not (final / "pins.json").is_file():  # published meanwhile by another process is fine
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


def release_of(archives: Iterable[Path]) -> str:
    """The release a local MME over these archives emulates: the newest of theirs (their images must run one
    Python: ServeError otherwise)."""
    found = sorted(set(releases_of(archives)), key=Release.of) or [DEFAULT_RELEASE]
    if len({Release.of(r).stub_python for r in found}) > 1:
        raise ServeError(f"archives of releases {', '.join(found)} run Python-backend steps on different Pythons; "
                         "one endpoint runs one image: serve them on separate endpoints")
    return found[-1]


def releases_of(archives: Iterable[Path]) -> list[str]:
    """The release each archive was built for (its manifest's; the default release for an archive without one)."""
    from conch.archive.manifest import read_manifest
    from conch.errors import ArchiveError

    found = []
    for archive in archives:
        try:
            found.append(read_manifest(Path(archive)).release)
        except ArchiveError:
            found.append(DEFAULT_RELEASE)
    return found
