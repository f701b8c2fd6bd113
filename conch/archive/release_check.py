"""What an archive meets on one Triton release's image (`conch check --release YY.MM`): the Python-backend stub's
Python against a packed environment's, the backends that release ships, and what its stub launcher does with an
environment. On an archive conch built for another release (its manifest says which) this is the upgrade check:
what breaks there, each with its fix. Sources of every fact: docs/load-rules.md, "Per release"."""

from __future__ import annotations

import re
import tarfile
from collections.abc import Mapping
from pathlib import Path

from conch.archive.check_report import CheckReport, Model
from conch.archive.manifest import MANIFEST_NAME, Manifest, read_manifest
from conch.ensembles.target import Release
from conch.errors import ArchiveError

ENV_PREFIX = "$$TRITON_MODEL_DIRECTORY/"
# python_backend r25.08 (#414, from #404): the stub launcher stops sourcing bin/activate
ACTIVATE_PARSED_FROM = Release(25, 8)
_PYTHON_LIB = re.compile(r"(?:^|/)lib/python(3\.\d+)/")
_TAR_NAMES_READ = 20_000  # an environment's lib/python3.X/ shows early; stop looking after this many members


def built_for(root: Path) -> Manifest | None:
    """The manifest of an unpacked archive, or None (hand-made, or unreadable: the check does not need it)."""
    try:
        return read_manifest(root)
    except ArchiveError:
        return None


def check_release(root: Path, models: Mapping[str, Model], release: Release | str, report: CheckReport,
                  manifest: Manifest | None) -> None:
    """What differs for the archive unpacked at ``root`` (its ``manifest``: :func:`built_for`) on Triton
    ``release``'s image, reported as findings."""
    release = Release.of(release)
    built = Release.of(manifest.release) if manifest is not None else None
    for model in models.values():
        _backend(model, release, report)
        env = model.config.parameters.get("EXECUTION_ENV_PATH")
        if env is not None and env.startswith(ENV_PREFIX):
            _environment(model, env, root, manifest, release, built, report)
    if built is not None and built != release:  # said first, over every finding of the check
        differs = (f"the {len(report.findings)} findings below say what differs there" if report.findings
                   else "nothing conch knows of differs there")
        report.warning(MANIFEST_NAME, f"built for Triton {built}, checked for {release}: {differs}")
        report.findings.insert(0, report.findings.pop())


def _backend(model: Model, release: Release, report: CheckReport) -> None:
    if not release.has_tensorflow and model.config.served.startswith("tensorflow"):
        report.error(f"{model.prefix}config.pbtxt", f"runs on the TensorFlow backend, which Triton {release} does not "
                     "ship (gone from 25.03): serve it on a 25.02 or older image, or convert the model (e.g. to ONNX)")


def _environment(model: Model, value: str, root: Path, manifest: Manifest | None, release: Release,
                 built: Release | None, report: CheckReport) -> None:
    path = (model.path / value[len(ENV_PREFIX):]).resolve()
    if not path.is_relative_to(root.resolve()) or not path.exists():
        return  # the archive check reports it
    rel = path.relative_to(root.resolve()).as_posix()
    record = manifest.environments.get(rel) if manifest is not None else None
    # the local target packs for the release's Python as production does (the same bytes): judged the same
    python = record.python if record is not None else env_python(path)
    if python and python != release.stub_python:
        report.error(f"{model.prefix}config.pbtxt", f"its environment {rel} is for Python {python}, but the "
                     f"Python-backend stub of Triton {release} runs Python {release.stub_python} and cannot load it: "
                     f"rebuild with `conch build --release {release}` (or pack the environment with Python "
                     f"{release.stub_python})")
    if not release < ACTIVATE_PARSED_FROM and (built is None or built < ACTIVATE_PARSED_FROM):
        report.warning(rel, f"on Triton {release} the Python backend no longer runs the environment's bin/activate "
                       f"(from {ACTIVATE_PARSED_FROM}): it sets only VIRTUAL_ENV, PATH and LD_LIBRARY_PATH, so "
                       "anything else the script (or conda's etc/conda/activate.d) sets is missing; set it in "
                       "model.py instead")


def env_python(path: Path) -> str:
    """The Python minor version a packed environment (folder or tarball) is for, from its lib/python3.X/ ("" when
    not found)."""
    if path.is_dir():
        found = sorted(p.name.removeprefix("python") for p in (path / "lib").glob("python3.*") if p.is_dir())
        return found[0] if found else ""
    try:
        with tarfile.open(path, "r|*") as tar:
            for i, member in enumerate(tar):
                match = _PYTHON_LIB.search(member.name + ("/" if member.isdir() else ""))
                if match:
                    return match.group(1)
                if i >= _TAR_NAMES_READ:
                    break
    except (tarfile.TarError, OSError, EOFError):
        return ""  # the archive check reports an environment it cannot use
    return ""
