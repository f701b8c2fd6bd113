"""The Python a local tritonserver runs its Python-backend stub on: the release's image Python (3.10 up to
24.10, 3.12 from 24.11), found where users keep interpreters, with an environment that holds what the image's
Python holds and nothing else (server ``build.py``; docs/image-python.md). Where no interpreter of that
version is found, the host's runs instead and says so (``StubPython.note``): the local proof is never kinder
than production without saying it."""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from conch.ensembles.target import DEFAULT_RELEASE, Release
from conch.errors import ServeError
from conch.image_python import (  # noqa: F401  (STRICT_ENV, strict_default: the names the CLI and servers use)
    INTERPRETER_ENV,
    STRICT_ENV,
    Interpreter,
    find_interpreter,
    host_interpreter,
    image_environment,
    image_requirements,
    other_python,
    strict_default,
)


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
        return other_python(self.version, self.wanted, ", ".join(self.releases) or DEFAULT_RELEASE)

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
    packages = sorted({p for r in chosen for p in image_requirements(Release.of(r))})
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
