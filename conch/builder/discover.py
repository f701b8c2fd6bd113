"""Find the ensembles declared in Python files: every module-level Ensemble in each file."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import sys
import traceback
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from conch.cache import drop_racy_bytecode, file_sha256, imported_siblings, key_of
from conch.ensembles.ensemble import Ensemble
from conch.errors import ArchiveError, BuildError, ConchError, DeclarationError
from conch.startup_lines import startup_lines_dropped

# The digest of each declaration module's files when conch imported it: a module imported again after an edit.
# Weak keys: an entry lives as long as its module does.
_LOADED: weakref.WeakKeyDictionary[ModuleType, str] = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class SortedPaths:
    """What a command was given: built archives, and ensemble sources (.py files or folders of them)."""

    archives: list[Path]
    sources: list[Path]


def sort_paths(paths: Sequence[Path], *, archives_for: str | None = None, must_exist: bool = False) -> SortedPaths:
    """Sort paths into archives (``*.tar.gz``) and ensemble sources; a folder gives its archives, and is a
    source when it holds ensemble files (not ``_private.py``).

    Args:
        archives_for: the command that takes built archives only (e.g. ``"deploy"``): a path that is not an
            archive, or a folder without any, is an ArchiveError saying to build first.
        must_exist: an archive path that does not exist is an ArchiveError (otherwise whoever reads it reports it).
    """
    archives: list[Path] = []
    sources: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            found = sorted(path.glob("*.tar.gz"))
            if archives_for and not found:
                raise ArchiveError(f"{path} holds no .tar.gz archives: run `conch build --out {path}` first")
            archives.extend(found)
            if not archives_for and any(not p.name.startswith("_") for p in path.glob("*.py")):
                sources.append(path)
        elif path.name.endswith(".tar.gz"):
            if must_exist and not path.is_file():
                raise ArchiveError(f"{path}: no such archive; give archives built by `conch build`, or their folder")
            archives.append(path)
        elif archives_for:
            raise ArchiveError(f"{archives_for} takes built archives (.tar.gz), not {path}: run `conch build` first")
        else:
            sources.append(path)
    return SortedPaths(archives, sources)


def python_files(paths: Iterable[Path]) -> list[Path]:
    """The .py files named, and those directly inside named folders (skipping _private.py)."""
    files: list[Path] = []
    for path in paths:
        path = Path(path)
        if path.is_dir():
            files.extend(p for p in sorted(path.glob("*.py")) if not p.name.startswith("_"))
        elif path.suffix == ".py" and path.is_file():
            files.append(path)
        elif not path.exists():
            raise BuildError(f"{path}: no such file or folder; give ensemble .py files or folders of them")
        else:
            raise BuildError(f"{path}: expected a .py file or a folder of them")
    return files


def load_module_ensembles(path: Path) -> list[Ensemble]:
    """Import one file under its own name (so its step modules import as siblings) and collect ensembles."""
    path = path.resolve()
    name = path.stem
    module = sys.modules.get(name)
    if module is not None and Path(getattr(module, "__file__", "") or "").resolve() != path:
        raise BuildError(
            f"{path}: a different module named {name!r} is already imported ({module.__file__}); rename the file"
        )
    folder = str(path.parent)  # after the refusal above: a refused file's folder is not left on sys.path
    if folder not in sys.path:
        sys.path.insert(0, folder)
    sources = imported_siblings(path)
    digest = key_of(sorted((f, file_sha256(f)) for f in sources))
    if module is not None and _LOADED.setdefault(module, digest) != digest:  # one imported elsewhere: as it is
        # the file, or a file beside it that it imports, changed since conch imported it (a notebook's edit):
        # import them again, the siblings too, or the file would get their old modules from sys.modules
        names = {os.path.basename(f) for f in sources}  # resolving every module's file costs 0.4 s with torch
        for other, loaded in list(sys.modules.items()):
            file = getattr(loaded, "__file__", None)
            if file and os.path.basename(file) in names and str(Path(file).resolve()) in sources:
                sys.modules.pop(other, None)
        module = None
    if module is None:
        drop_racy_bytecode(sources)
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise BuildError(f"{path}: cannot be imported")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            with startup_lines_dropped():  # e.g. TensorFlow's, when the file imports it
                spec.loader.exec_module(module)
        except ConchError as exc:
            sys.modules.pop(name, None)
            exc.within(path.name)
            raise
        except Exception as exc:  # the user's code failed: say where, in one line, instead of a traceback
            sys.modules.pop(name, None)
            lines = [f.lineno for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename) == path]
            at = f" line {lines[-1]}" if lines else ""
            raise DeclarationError(f"{path.name}{at}: {type(exc).__name__}: {exc}; fix the file") from exc
        _LOADED[module] = digest
    return [v for v in vars(module).values() if isinstance(v, Ensemble)]


def discover(paths: Iterable[Path], on_error: Callable[[ConchError], None] | None = None) -> list[Ensemble]:
    """All ensembles in the given files/folders, in file order; names must be unique.

    With ``on_error``, a path or file that fails is reported to it and skipped instead of raising."""
    return [ensemble for _, ensemble in locate(paths, on_error)]


def locate(
    paths: Iterable[Path], on_error: Callable[[ConchError], None] | None = None
) -> list[tuple[Path, Ensemble]]:
    """Like discover(), with the file each ensemble is declared in (so another process can import it)."""
    found: list[tuple[Path, Ensemble]] = []
    seen: dict[str, Path] = {}
    for path in paths:
        try:
            files = python_files([path])
        except ConchError as exc:
            if on_error is None:
                raise
            on_error(exc)
            continue
        for file in files:
            try:
                ensembles = load_module_ensembles(file)
            except ConchError as exc:
                if on_error is None:
                    raise
                on_error(exc)
                continue
            for ensemble in ensembles:
                if any(e is ensemble for _, e in found):  # imported by another file of the paths
                    continue
                if ensemble.name in seen:
                    raise DeclarationError(
                        f"ensemble name {ensemble.name!r} is declared in both {seen[ensemble.name]} and {file}"
                    )
                seen[ensemble.name] = file
                found.append((file.absolute(), ensemble))  # build workers may run elsewhere
    return found


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count`` (1-based, as ``--shard K/N`` says): the ensembles whose name hashes to
    it. The split depends on the names alone (sha256, not Python's per-process hash, the files' paths or
    their order), so N machines given the same sources build every ensemble exactly once between them."""

    index: int
    count: int

    @staticmethod
    def parse(text: str) -> Shard:
        """``K/N`` with 1 <= K <= N; anything else is a BuildError saying what to write."""
        match = re.fullmatch(r"([0-9]+)/([0-9]+)", text)
        if match and 1 <= int(match[1]) <= int(match[2]):
            return Shard(int(match[1]), int(match[2]))
        raise BuildError(f"--shard {text!r}: expected K/N with 1 <= K <= N (e.g. --shard 1/4 … --shard 4/4 "
                         "for a matrix of 4 jobs)")

    def holds(self, ensemble: str) -> bool:
        return shard_of(ensemble, self.count) == self.index

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def shard_of(ensemble: str, count: int) -> int:
    """The shard (1..count) an ensemble name falls in."""
    return int.from_bytes(hashlib.sha256(ensemble.encode()).digest()[:8], "big") % count + 1
