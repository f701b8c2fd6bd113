"""Python-backend code judged against the Python of the release's image, before anything loads: each module a
model's code imports must come from that Python's standard library, the few packages the image installs
(conch.image_python), the model's own folders, or its environment (EXECUTION_ENV_PATH); and the code must
compile under that Python. `conch check` and `conch build` ask this module; its findings name the file, the
line and the fix."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tarfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from isal import igzip, isal_zlib

from conch.archive import import_scan
from conch.archive.release_check import ENV_PREFIX
from conch.cache import file_sha256, remembered
from conch.ensembles.target import Release
from conch.image_python import find_interpreter, image_packages, requirement_of, stdlib_modules, stdlib_since

Level = Literal["error", "warning"]
_SITE = re.compile(r"(?:^|/)lib/python3\.\d+/site-packages/([^/]+)")
SCAN_TIMEOUT = 120.0
Hint = Callable[[str], "str | None"]


@dataclass(frozen=True)
class PythonCode:
    """One Python-backend model's code as its stub imports it."""

    sources: Mapping[str, Path]  # path in the archive -> the file to read (the .py files of its folder)
    local: frozenset[str]  # top-level names its version and model folders provide (both are on the stub's sys.path)
    env: frozenset[str] | None = None  # top-level names its environment provides (None: it has none)
    env_path: str = ""  # the environment, as the findings name it


@dataclass(frozen=True)
class CodeFinding:
    level: Level
    file: str
    message: str


@dataclass
class Judged:
    """The findings of one judgement, and which Python compiled the code."""

    findings: list[CodeFinding] = field(default_factory=list)
    compiled_with: str = ""


def folder_names(names: Iterable[str]) -> frozenset[str]:
    """The top-level module names a folder's entries provide (``x.py``, ``x/``, ``x.cpython-310-...so``)."""
    out = set()
    for name in names:
        if name.endswith((".dist-info", ".egg-info", ".pth", ".data")) or name.startswith((".", "__pycache__")):
            continue
        out.add(name.split(".")[0])
    return frozenset(out)


def environment_names(path: Path) -> frozenset[str] | None:
    """The top-level names importable from a packed environment (a folder, or a .tar.gz/.tar): the entries of its
    ``lib/python3.X/site-packages``. None when it cannot be read (the archive check names that). A tarball's are
    remembered by its content (reading one through is ~1 s for 30 MB)."""
    if path.is_dir():
        return frozenset(n for site in path.glob("lib/python3.*/site-packages")
                         for n in folder_names(p.name for p in site.iterdir()))
    try:
        digest = file_sha256(path)
    except OSError:
        return None
    names = remembered("environment-names", ["site-packages entries", digest], lambda: _tar_site_entries(path))
    return None if names is None else folder_names(names)


def _tar_site_entries(path: Path) -> list[str] | None:
    found: set[str] = set()
    try:
        with open(path, "rb") as raw:
            gzipped = raw.read(2) == b"\x1f\x8b"
        with igzip.open(path) if gzipped else open(path, "rb") as fh, tarfile.open(fileobj=fh, mode="r|") as tar:
            for member in tar:
                match = _SITE.search(member.name)
                if match:
                    found.add(match.group(1))
    except (tarfile.TarError, OSError, EOFError, igzip.BadGzipFile, isal_zlib.error):  # type: ignore[misc]
        return None
    return sorted(found)


def judge(models: Iterable[PythonCode], release: Release | str, hint: Hint | None = None) -> Judged:
    """Each model's code against Triton ``release``'s image Python: a file that does not compile there, and each
    import (not optional) that neither that Python, nor the model's folders, nor its environment provides.
    ``hint(module)``: what the build knows of a missing module (the user's own, left behind), else None."""
    release = Release.of(release)
    models = list(models)
    python = release.stub_python
    files = sorted({str(path) for m in models for path in m.sources.values()})
    scanned, compiled_with = _scan(files, python)
    judged = Judged(compiled_with=compiled_with)
    provided = stdlib_modules(python) | image_packages(release)
    for model in models:
        for file, path in sorted(model.sources.items()):
            result = scanned.get(str(path), {})
            if "error" in result:
                judged.findings.append(_compile_finding(file, result["error"], release, compiled_with))
                continue
            named: set[str] = set()
            for line, module, optional in result.get("imports", []):
                top = module.split(".")[0]
                if optional or top in named or top in provided or top in model.local or top in (model.env or ()):
                    continue
                named.add(top)
                judged.findings.append(CodeFinding("error", file, _missing(top, line, model, release, hint)))
    return judged


def _missing(module: str, line: int, model: PythonCode, release: Release, hint: Hint | None) -> str:
    python = release.stub_python
    since = stdlib_since(module, python)
    where = f"line {line}: imports {module}"
    if since is not None:
        return (f"{where}, which the standard library has from Python {since}: Triton {release}'s image runs Python "
                f"{python}, which lacks it (ModuleNotFoundError at load); use a package that provides it on "
                f"{python} in the step's environment (env=conch.PythonEnv(requirements=[...])), or build for a "
                f"release whose Python has it")
    env = (f"nor does its environment {model.env_path}" if model.env is not None
           else "and the model has no environment (EXECUTION_ENV_PATH)")
    own = hint(module) if hint is not None else None
    if own is not None:
        return f"{where}, {own}"
    return (f"{where}, which Triton {release}'s image Python {python} does not provide (its standard library, "
            f"numpy, pip, setuptools, wheel, virtualenv), {env}: it fails with ModuleNotFoundError on SageMaker; "
            f"give the step an environment that holds it: env=conch.PythonEnv(requirements=[{requirement_of(module)}]) "
            "(a hand-written model: an EXECUTION_ENV_PATH environment)")


def _compile_finding(file: str, error: str, release: Release, compiled_with: str) -> CodeFinding:
    python = release.stub_python
    if compiled_with == python:
        return CodeFinding("error", file, f"does not compile on Python {python}, which Triton {release}'s image runs "
                           f"it with: {error}; write it in Python {python}'s syntax")
    return CodeFinding("warning", file, f"does not compile on Python {compiled_with} (conch's own; no Python {python} "
                       f"was found to judge it as Triton {release}'s image does, e.g. `pyenv install {python}`): "
                       f"{error}")


def _scan(files: list[str], python: str) -> tuple[dict[str, Any], str]:
    """Each file's compile result and imports, by the release's Python when this machine has it (else by conch's
    own, with the release's grammar as far as ``ast`` can tell), and which Python that was."""
    if not files:
        return {}, python
    found = find_interpreter(python)
    interpreter = found.executable if found is not None else None
    if interpreter is not None:
        try:
            done = subprocess.run([str(interpreter), "-I", "-S", import_scan.__file__], input=json.dumps(files),
                                  capture_output=True, text=True, timeout=SCAN_TIMEOUT, check=True)
            answer = json.loads(done.stdout)
            return answer["files"], answer["python"]
        except (OSError, subprocess.SubprocessError, ValueError, KeyError):
            pass  # an interpreter that does not run: judged here, as without one
    host = f"{sys.version_info[0]}.{sys.version_info[1]}"
    major, minor = (int(p) for p in python.split("."))
    grammar = (major, minor) if (major, minor) < sys.version_info[:2] else None
    return import_scan.scan_files(files, grammar), host if grammar is None else python


def archive_code(root: Path, model_path: Path, prefix: str, versions: Iterable[int],
                 env_value: str | None) -> PythonCode:
    """A Python-backend model folder of an unpacked archive (at ``model_path``, its files at ``prefix`` in the
    archive) as its stub imports it: each loaded version's model.py and the modules beside it that it imports."""
    from conch.cache import imported_siblings

    sources: dict[str, Path] = {}
    local: set[str] = set(folder_names(p.name for p in model_path.iterdir()))
    for version in versions:
        model_py = model_path / str(version) / "model.py"
        if not model_py.is_file():
            continue  # the archive check names a version without its model file
        local |= folder_names(p.name for p in model_py.parent.iterdir())
        for file in imported_siblings(model_py):
            sources[f"{prefix}{Path(file).relative_to(model_path).as_posix()}"] = Path(file)
    env, env_path = None, ""
    if env_value is not None and env_value.startswith(ENV_PREFIX):
        path = (model_path / env_value[len(ENV_PREFIX):]).resolve()
        if path.is_relative_to(root.resolve()) and path.exists():
            env, env_path = environment_names(path), path.relative_to(root.resolve()).as_posix()
            if env is None:
                return PythonCode({}, frozenset())  # an environment conch cannot read: nothing is judged
    return PythonCode(sources, frozenset(local), env, env_path)
