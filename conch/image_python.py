"""The Python that a release's Triton image runs Python-backend models with: the modules it provides (its
standard library, and the few packages the image installs) and an interpreter of its version on this machine.
Sources: server ``build.py`` (python_backend's image stage) per release; docs/fidelity.md, "The image's Python"."""

from __future__ import annotations

import functools
import os
import shutil
from pathlib import Path

from conch.ensembles.target import Release

# What the image's pip installs beside its Python (server build.py: `pip3 install --upgrade numpy<2 virtualenv`,
# over the distribution's pip, setuptools and wheel), as the top-level modules they install; virtualenv brings
# distlib, filelock and platformdirs. setuptools' distutils-precedence.pth provides `distutils` on 3.12 too.
IMAGE_PACKAGES = ("numpy", "pip", "setuptools", "wheel", "virtualenv", "distlib", "filelock", "platformdirs",
                  "_distutils_hack", "pkg_resources", "distutils")
# The Python backend's own modules: its folder is on the stub's sys.path (python_backend src/pb_stub.cc)
BACKEND_MODULES = ("triton_python_backend_utils", "c_python_backend_utils")


def image_packages(release: Release | str) -> frozenset[str]:
    """Top-level module names the release's image Python holds beyond its standard library."""
    Release.of(release)  # the same list for every release conch targets (23.02 on)
    return frozenset(IMAGE_PACKAGES + BACKEND_MODULES)


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


def find_python(version: str) -> Path | None:
    """An interpreter of Python ``version`` ("3.10") on this machine: ``$CONCH_PYTHON_3_10``, pyenv's versions
    (``$PYENV_ROOT``, else ``~/.pyenv``), uv's managed Pythons, then ``python3.10`` on PATH."""
    name = f"python{version}"
    chosen = os.environ.get(f"CONCH_PYTHON_{version.replace('.', '_')}")
    if chosen:
        return Path(chosen) if Path(chosen).is_file() else None
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    uv = Path(os.environ.get("UV_PYTHON_INSTALL_DIR") or Path.home() / ".local" / "share" / "uv" / "python")
    candidates = sorted(pyenv.glob(f"{version}.*/bin/{name}"), key=_patch, reverse=True)
    candidates += sorted(uv.glob(f"cpython-{version}.*/bin/{name}"), reverse=True)
    found = next((c for c in candidates if c.is_file()), None)
    if found is not None:
        return found
    on_path = shutil.which(name)
    return Path(on_path) if on_path and ".pyenv/shims" not in on_path else None  # a shim may name no install


def _patch(path: Path) -> int:
    tail = path.parent.parent.name.split(".")[-1]
    return int(tail) if tail.isdigit() else -1
