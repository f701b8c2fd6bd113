"""conch's cache folder: exported models, backend folders and packed environments, reused across runs."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import inspect
import json
import os
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import CodeType
from typing import Any


def cache_dir() -> Path:
    """``$CONCH_CACHE_DIR``, or ``~/.cache/conch``, as an absolute path."""
    root = os.environ.get("CONCH_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "conch")
    path = Path(root).absolute()  # a relative setting means the folder it names now, not where a child runs
    path.mkdir(parents=True, exist_ok=True)
    return path


def cached_file(kind: str, key: str, filename: str, produce: Callable[[Path], None]) -> Path:
    """``<cache>/<kind>/<key>/<filename>``, produced once by ``produce(path)`` and published atomically."""
    import shutil
    import tempfile

    final = cache_dir() / kind / key
    path = final / filename
    if path.is_file():
        return path
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=final.parent))
    try:
        produce(tmp / filename)
        if not (tmp / filename).is_file():
            raise FileNotFoundError(f"producing {kind}/{key} wrote no {filename}")
        with contextlib.suppress(OSError):  # published meanwhile by another process
            os.replace(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def read_json(path: Path) -> Any:
    """The JSON value kept at ``path``; None when it is missing or damaged."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def write_json(path: Path, data: object) -> None:
    """Publish atomically (parallel builds share the cache); a lost race only repeats work."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(data, sort_keys=True))
    os.replace(tmp, path)


def key_of(material: object) -> str:
    """sha256 of ``material`` as sorted JSON (what is not JSON by its str)."""
    return hashlib.sha256(json.dumps(material, sort_keys=True, default=str).encode()).hexdigest()


_refresh = False


@contextlib.contextmanager
def refreshing(on: bool = True) -> Iterator[None]:
    """Inside (when ``on``), what conch remembers of steps by content is derived again and kept anew
    (``conch build --refresh``): ``remembered`` values and the caches that call ``refreshed_key``."""
    global _refresh
    before, _refresh = _refresh, _refresh or on
    try:
        yield
    finally:
        _refresh = before


def refreshed_key(kind: str, key: str) -> str:
    """``key`` of ``<cache>/<kind>/``, its entry removed first while refreshing, so it is produced again."""
    if _refresh:
        import shutil

        shutil.rmtree(cache_dir() / kind / key, ignore_errors=True)
    return key


def remembered(kind: str, material: object, compute: Callable[[], Any]) -> Any:
    """A JSON value that conch's own code computes from ``material`` (the content it depends on, JSON-able),
    kept under ``<cache>/<kind>/``: an unchanged rebuild reads it instead of importing the framework that
    computes it. The key also covers conch's code (``own_code``) and the Python and distributions installed
    (``environment``: the framework's version among them). Never for user code, unless ``material`` holds its
    ``pure_key`` (a sample's expected outputs declared ``pure=True``): otherwise ``compute`` must run nothing
    but conch and the libraries it imports. A failure is not remembered; a lost race only repeats the work."""
    key = key_of([material, own_code(), environment()])[:32]
    where = cache_dir() / kind / f"{key}.json"
    known = None if _refresh else read_json(where)
    if known is not None:
        return known
    value = compute()
    write_json(where, value)
    return value


def code_digest(fn: Callable[..., Any]) -> str | None:
    """The digest of ``code_identity``, or None when the code cannot be told by content."""
    return code_identity(fn)[0]


def code_identity(fn: Callable[..., Any]) -> tuple[str | None, str]:
    """Digest of the user code a function can reach as far as conch can tell (a sample's expected outputs, a
    step's code, a DALI pipeline): the source of the file defining it and of the Python files beside it that
    it imports, read from the code (``import x`` / ``from x import`` anywhere in the file, followed through
    those siblings), its default arguments and closure values, and the arguments a ``functools.partial``
    binds; for a callable class its methods, for an instance or a bound method its attributes too. None when
    the code cannot be told by content (a function without a source file, e.g. defined in a
    notebook, values whose repr is not their content, or code its file no longer holds: a module imported
    before an edit). It does not cover what the code reads (files, environment variables), modules outside its
    folder or installed libraries: only a declaration that says its function is pure (``pure=True``) is
    answered from a key built on it (``pure_key``). Returns ``(digest, "")``, or ``(None, why)``: why conch
    cannot key it, in words a build's note can say."""
    bound: list[object] = []
    while isinstance(fn, functools.partial):
        bound.append([fn.args, sorted(fn.keywords.items())])
        fn = fn.func
    fn = getattr(fn, "__wrapped__", fn)  # a decorated function (DALI's @pipeline_def): the user's own
    code = getattr(fn, "__code__", None)
    if code is not None:
        cells = [cell.cell_contents for cell in getattr(fn, "__closure__", None) or ()]
        bound.append([getattr(fn, "__defaults__", None), getattr(fn, "__kwdefaults__", None), cells,
                      getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)])
        if inspect.ismethod(fn):  # a bound method: its instance's attributes (a classmethod: its class's name)
            owner = fn.__self__
            bound.append(owner.__qualname__ if isinstance(owner, type) else getattr(owner, "__dict__", None))
        codes, origin = [code], _real_file(code.co_filename)
    else:  # a callable class, or an instance of one (with its attributes): its methods' code
        owner = fn if isinstance(fn, type) else type(fn)
        bound.append([owner.__module__, owner.__qualname__, None if fn is owner else getattr(fn, "__dict__", None)])
        codes, opaque = _method_codes(owner)
        if opaque:
            return None, (f"its method {opaque} is wrapped by a decorator whose code conch cannot read: declare "
                          "the plain method, or the decorator with functools.wraps")
        origin = _real_file(getattr(sys.modules.get(owner.__module__), "__file__", None))
    if origin is None:
        return None, "it has no source file (defined in a notebook or an interactive session): move it to a module"
    if not plain(bound):
        return None, ("its closures, defaults, partial arguments or instance attributes hold a value whose repr is "
                      "not its content (an array, an object): pass such data as a file of the step, or compute it "
                      "in the code")
    if not _compiled_from(codes, origin):
        return None, (f"its code is not what {os.path.basename(origin)} compiles to now (a decorated method, or a "
                      "module edited since it was imported: reload it)")
    files = imported_siblings(Path(origin))
    return key_of([sorted((os.path.basename(f), file_sha256(f)) for f in files), repr(bound)]), ""


def _method_codes(owner: type) -> tuple[list[CodeType], str]:
    """The code of a class's methods (a decorated one through its ``__wrapped__`` chain, a static or class method
    through its function), and the name of the first method whose code cannot be reached ("" when none)."""
    codes: list[CodeType] = []
    for name, value in vars(owner).items():
        if isinstance(value, staticmethod | classmethod):
            value = value.__func__
        value = inspect.unwrap(value) if callable(value) else value
        code = getattr(value, "__code__", None)
        if isinstance(code, CodeType):
            codes.append(code)
        elif callable(value) and not isinstance(value, type) and (name == "__call__"
                                                                  or hasattr(type(value), "__get__")):
            return codes, name  # __call__, or a method (an object that binds as one) conch cannot read
    return codes, ""


def _compiled_from(codes: list[CodeType], origin: str) -> bool:
    """Whether each of ``codes`` is what its file compiles to now. A module imported before an edit (a notebook
    that did not reload it) runs its old code, which a key over the file's new bytes must not stand for."""
    try:
        todo = [compile(Path(origin).read_bytes(), origin, "exec", dont_inherit=True)]
    except (OSError, SyntaxError, ValueError):
        return False
    missing = list(codes)
    while todo and missing:  # code objects compare by name, first line, bytecode, constants and names (not file)
        found = todo.pop()
        missing = [c for c in missing if c != found]
        todo.extend(c for c in found.co_consts if isinstance(c, CodeType))
    return not missing


def pure_key(fn: Callable[..., Any]) -> list[object] | None:
    """The key of what a function declared pure (``pure=True``) computes: its code (``code_digest``), the
    Python that runs it, every distribution installed where it imports from (``environment``) and the files of
    those installed editable (``editable_sources``); None when its code cannot be told by content (it is then
    computed every time)."""
    code = code_digest(fn)
    return None if code is None else [code, environment(), editable_sources()]


def environment() -> list[object]:
    """The Python and the installed distributions this process imports from: the interpreter's version and
    build, and the ``*.dist-info`` / ``*.egg-info`` names (which hold each distribution's version) of every
    folder on ``sys.path``. Read at each call (a few folder listings): a distribution installed while a
    process runs changes it."""
    found: list[str] = []
    for entry in sys.path:
        folder = entry or "."
        try:
            names = os.listdir(folder)
        except OSError:  # a zip, or a folder that does not exist
            continue
        found.extend(f"{os.path.abspath(folder)}/{n}" for n in names if n.endswith((".dist-info", ".egg-info")))
    return [sys.version, sys.implementation.cache_tag, sys.platform, sorted(found)]


def editable_sources() -> list[object]:
    """The files of every distribution installed editable (pip install -e) where this process imports from,
    by their ``stat_identity`` (their sha256 when changed in the last two seconds): its dist-info name and
    version stay the same while its code is edited, so ``environment`` alone would not see an edit. The files
    are those of its top-level packages (``top_level.txt``) as this process finds them, else every ``.py``
    file of the folder it was installed from."""
    found: list[object] = []
    for entry in sys.path:
        folder = entry or "."
        try:
            names = sorted(n for n in os.listdir(folder) if n.endswith(".dist-info"))
        except OSError:
            continue
        for name in names:
            dist_info = os.path.join(folder, name)
            try:
                st = os.stat(dist_info)
            except OSError:
                continue
            roots = _editable_roots(dist_info, st.st_ino, st.st_mtime_ns)
            if roots:
                found.append([name, [_file_identity(f) for root in roots for f in _source_files(root)]])
    return found


@functools.lru_cache(maxsize=4096)
def _editable_roots(folder: str, inode: int, mtime_ns: int) -> tuple[Path, ...]:
    """Where an editable distribution's code is (none for an ordinary install); remembered in this process by
    the dist-info folder's inode and mtime, which a reinstall changes."""
    dist_info = Path(folder)
    try:
        direct = json.loads((dist_info / "direct_url.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ()
    if not isinstance(direct, dict) or not (direct.get("dir_info") or {}).get("editable"):
        return ()
    try:
        tops = (dist_info / "top_level.txt").read_text(encoding="utf-8").split()
    except OSError:
        tops = []
    roots: list[Path] = []
    for top in tops:
        try:
            spec = importlib.util.find_spec(top)  # a top-level name: found, not imported
        except (ImportError, ValueError):
            continue
        if spec is not None and spec.submodule_search_locations:
            roots.extend(Path(p) for p in spec.submodule_search_locations)
        elif spec is not None and spec.origin and os.path.isfile(spec.origin):
            roots.append(Path(spec.origin))
    url = str(direct.get("url", ""))
    if not roots and url.startswith("file://"):
        roots.append(Path(url.removeprefix("file://")))
    return tuple(roots)


def _source_files(root: Path) -> list[Path]:
    """A module file, or every file of a package folder (``.py`` only for a project folder, whose virtual
    environments and hidden folders are left out)."""
    if root.is_file():
        return [root]
    package = (root / "__init__.py").is_file()
    files: list[Path] = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith(".")
                         and not (Path(folder) / d / "pyvenv.cfg").exists())
        files.extend(Path(folder) / n for n in sorted(names)
                     if (package and not n.endswith((".pyc", ".pyo"))) or n.endswith(".py"))
    return files


def _file_identity(path: Path) -> object:
    try:
        return stat_identity(path) or [str(path), file_sha256(path)]
    except OSError:
        return [str(path), None]


@functools.cache
def own_code() -> str:
    """Digest of conch's own code (every ``.py`` and template of the package): a cache of what conch's code
    derives keys on it, so a conch edited between two runs (an editable install) is not answered from what
    the older code derived. Taken once per process: the code a process runs is what it imported."""
    package = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for path in sorted(p for p in package.rglob("*") if p.suffix in (".py", ".j2") and p.is_file()):
        h.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


RACY_NS = 2 * 10**9  # a file changed this recently may change again within its file system's clock tick


def stat_identity(path: str | os.PathLike[str]) -> tuple[str, int, int, int, int, int] | None:
    """What tells a file's content apart without reading it, as git's index does: its path, size, inode,
    device, and the ns mtime and ctime (ctime cannot be set back by a program). None when the file changed
    less than ``RACY_NS`` ago: a write within the same clock tick would keep all of these (git's "racily
    clean" entries), so its content must be read. Raises OSError for a file that cannot be stat'ed."""
    import time

    st = os.stat(path)
    if time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) < RACY_NS:
        return None
    return (os.path.abspath(path), st.st_size, st.st_ino, st.st_dev, st.st_mtime_ns, st.st_ctime_ns)


def drop_racy_bytecode(sources: Iterable[str | os.PathLike[str]]) -> None:
    """Delete the bytecode cache of each source file whose cache was written within the second of the file's
    mtime. Python takes a cache as current when the source's size and whole-second mtime match it, so a file
    written again within that second at the same size (``max_batch_size=4`` -> ``8``) would run its old code
    while conch's keys hash its new bytes. Python writes the cache again at the next import."""
    for source in sources:
        try:
            cached = importlib.util.cache_from_source(os.fspath(source))
            if os.stat(cached).st_mtime_ns // 10**9 <= os.stat(source).st_mtime_ns // 10**9:
                os.unlink(cached)
        except (OSError, ValueError, NotImplementedError):  # no cache, no source, or no cache tag
            continue


_PLAIN = (str, int, float, bool, type(None))


def plain(value: object) -> bool:
    """A value whose repr is its content (no object identity in it), so it can be part of a cache key."""
    if isinstance(value, _PLAIN):
        return True
    if isinstance(value, tuple | list):
        return all(plain(v) for v in value)
    if isinstance(value, dict):
        return all(plain(k) and plain(v) for k, v in value.items())
    return False


def imported_siblings(origin: Path) -> set[str]:
    """``origin`` and the Python files of its folder that it imports, directly or through each other: a module
    ``x.py`` beside it, or every file of a package ``x/`` beside it; a relative import (``from . import x``,
    ``from .x import y``) is followed from the importing file's own folder."""
    found, todo = {str(origin)}, [origin]
    while todo:
        path = todo.pop()
        for level, name in _imports(path):
            base = origin.parent if level == 0 else path.parents[level - 1] if level <= len(path.parents) else None
            for file in _module_files(base, name) if base is not None else ():
                if str(file) not in found:
                    found.add(str(file))
                    todo.append(file)
    return found


_AST_LOCK = threading.Lock()


def _module_files(base: Path, name: str) -> list[Path]:
    """The files of module ``name`` in folder ``base``: ``name.py``, or every ``.py`` of package ``name/``."""
    module = base / f"{name}.py"
    if module.is_file():
        return [module]
    package = base / name
    if (package / "__init__.py").is_file():
        return sorted(p for p in package.rglob("*.py") if "__pycache__" not in p.parts and p.is_file())
    return []


def _imports(path: Path) -> tuple[tuple[int, str], ...]:
    """(level, first name) of the imports anywhere in a Python file (level 0: absolute; ``from . import x``
    gives (1, x))."""
    import ast

    try:
        source = path.read_bytes()
        with _AST_LOCK:  # CPython 3.11 before 3.11.8 breaks ast.parse run in two threads at once (cpython#106905)
            tree = ast.parse(source)
    except (OSError, SyntaxError, ValueError):
        return ()
    names: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend((0, a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append((node.level, node.module))
        elif isinstance(node, ast.ImportFrom):
            names.extend((node.level, a.name) for a in node.names)
    return tuple(dict.fromkeys((level, n.partition(".")[0]) for level, n in names))


def _real_file(file: object) -> str | None:
    """A module's file as an absolute path, or None when it is not a real file: torch registers
    pseudo-modules whose ``__file__`` is a bare ``_ops.py``, which would resolve against the working folder."""
    if not isinstance(file, str) or not os.path.isabs(file) or not os.path.isfile(file):
        return None
    return os.path.normpath(file)


def file_sha256(path: str | os.PathLike[str]) -> str:
    """The sha256 of a file's content, read in 1 MiB blocks (a model file is not held in memory whole)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
