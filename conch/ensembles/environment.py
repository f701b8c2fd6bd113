"""Python environments that Python-backend steps run in (Triton's EXECUTION_ENV_PATH)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from conch.errors import DeclarationError

# Where packed environments sit in an archive: at its root, beside the model folders (not a model: no
# config.pbtxt). The archive reader (conch.archive.verify) names the same folder.
ENV_DIR = "conch-envs"


@dataclass(frozen=True)
class PythonEnv:
    """What a Python step's code needs beyond the Triton image's Python.

    Give exactly one source:
        requirements: pip requirement strings; conch fetches Linux x86-64 wheels for the target's
            Python (no conda needed, any host).
        conda_prefix: an existing conda environment, packed with conda-pack; its Python must match
            the target release's stub.
        archive: an environment packed already (.tar.gz, .tgz or .tar, env root at the archive root),
            or a folder holding one unpacked.

    ``unpacked=True`` lays the environment out as a folder instead of a .tar.gz (from release 23.07:
    loads about a second faster, archive larger). Steps of one ensemble that declare equal
    environments share one copy in the archive.
    """

    requirements: tuple[str, ...] = ()
    conda_prefix: Path | None = None
    archive: Path | None = None
    unpacked: bool = False
    name: str = "env"

    def __post_init__(self) -> None:
        object.__setattr__(self, "requirements", tuple(str(r).strip() for r in self.requirements if str(r).strip()))
        for field in ("conda_prefix", "archive"):
            value = getattr(self, field)
            if value is not None:
                object.__setattr__(self, field, Path(value))
        given = [bool(self.requirements), self.conda_prefix is not None, self.archive is not None]
        if sum(given) != 1:
            raise DeclarationError(
                "PythonEnv: give exactly one of requirements=[...], conda_prefix=..., archive=..."
            )
        if not self.name.replace("-", "_").isidentifier():
            raise DeclarationError(f"PythonEnv name {self.name!r}: use letters, digits, '_' and '-'")
        for req in self.requirements:
            _check_requirement(req)
        if self.archive is not None:
            suffixes = "".join(self.archive.suffixes[-2:])
            if suffixes in (".tar.xz", ".txz") or self.archive.suffix == ".txz":
                raise DeclarationError(
                    f"PythonEnv archive {self.archive.name}: Triton's Python backend cannot use .tar.xz "
                    "(and a failed .tar.xz load breaks every later environment load until restart); "
                    "repack it as .tar.gz"
                )
            if not (self.archive.is_dir() or suffixes in (".tar.gz",) or self.archive.suffix in (".tgz", ".tar")):
                raise DeclarationError(
                    f"PythonEnv archive {self.archive}: use a .tar.gz, .tgz or .tar file, or an unpacked folder"
                )

    @classmethod
    def from_requirements_file(cls, path: str | Path, *, unpacked: bool = False, name: str = "env") -> PythonEnv:
        """Read a requirements.txt (comments, blank lines and ``-r`` includes are honoured)."""
        return cls(requirements=tuple(_read_requirements(Path(path))), unpacked=unpacked, name=name)

    def describe(self) -> str:
        if self.requirements:
            return ", ".join(self.requirements)
        return f"conda env {self.conda_prefix}" if self.conda_prefix else f"packed env {self.archive}"


def _check_requirement(req: str) -> None:
    from packaging.requirements import InvalidRequirement, Requirement

    if req.startswith(("-", "git+", "http:", "https:", "file:", ".", "/")):
        raise DeclarationError(
            f"PythonEnv requirement {req!r}: only named requirements (name[extras] specifier) are supported, "
            "so the environment resolves to wheels by name and version"
        )
    try:
        Requirement(req)
    except InvalidRequirement as exc:
        raise DeclarationError(f"PythonEnv requirement {req!r} is not a valid requirement: {exc}") from None


def _read_requirements(path: Path, seen: Sequence[Path] = ()) -> list[str]:
    if not path.is_file():
        raise DeclarationError(f"requirements file {path} does not exist")
    if path.resolve() in seen:
        raise DeclarationError(f"requirements file {path} includes itself")
    out: list[str] = []
    for raw in path.read_text().splitlines():
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith(("-r ", "--requirement ")):
            include = path.parent / line.split(None, 1)[1]
            out.extend(_read_requirements(include, [*seen, path.resolve()]))
            continue
        out.append(line)
    return out
