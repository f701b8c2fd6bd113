"""The inputs a `conch build` command read, recorded, so that the same command can tell it is unchanged without
importing the ensemble files, numpy or the rest of conch (ninja's log or git's index, with the inputs traced
instead of declared).

While a build command runs, an audit hook (``sys.addaudithook``) notes every file opened, written, renamed and
every folder listed, and ``os.stat``/``os.lstat`` note every path whose metadata was asked; at the end the
modules loaded (``sys.modules``: a module read from a valid ``.pyc`` never opens its ``.py``), their packages'
folders and the folders of ``sys.path`` are added. Each input is kept with its mode, size, mtime and inode
and, below ``DIGEST_LIMIT``, a sha256 of its content; a folder with the names it holds. The ledger is keyed by
the command itself: its arguments, the working folder, the Python that runs it, ``sys.path``, ``sys.flags`` and
the whole environment but ``VOLATILE`` (variables read from C code, e.g. a thread count read by a native
library, are as much inputs as those read through ``os.environ``, so the environment is taken whole).

``unchanged(argv)`` answers from the ledger alone: every input with the same metadata, or (git's rule) with
different metadata but the same content, and every archive the command wrote with the same mode, size, mtime
and inode. A file modified within ``MARGIN_NS`` (``COARSE_MARGIN_NS`` where mtimes are whole milliseconds) of
the moment its state was taken ("racy git") is not trusted
by its metadata: its content is compared, or, when the build itself may have seen another version of it, it
counts as changed. A build that ran another program or connected to the network keeps no ledger (their answers
are not files it can check). What is not traced, and so trusted: content a library reads through C code (a
tokenizer in Rust reading a file Python never opened), and reads of /proc, /sys and /dev."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from conch.cache import cache_dir, key_of, read_json, write_json

__all__ = ["COARSE_MARGIN_NS", "DIGEST_LIMIT", "KEPT", "MARGIN_NS", "VOLATILE", "Trace", "absorb", "finish",
           "recording", "said", "start", "stop", "take_said", "traced", "unchanged"]

FORMAT = 1
# How close to the moment a state was taken an mtime may hide a later write in the same tick: Linux file
# systems keep nanoseconds but advance them by the kernel's clock tick (<= 10 ms); a file system whose mtimes are
# whole milliseconds or seconds (FAT, HFS+, some network ones) gets two seconds.
MARGIN_NS = 20_000_000
COARSE_MARGIN_NS = 2_000_000_000
DIGEST_LIMIT = 1 << 20  # larger inputs are trusted by metadata alone: any change of it counts as a change
# Environment variables a shell changes between two runs of the same command, which conch does not read.
VOLATILE = frozenset({"_", "OLDPWD", "PWD", "SHLVL", "COLUMNS", "LINES", "TERM_SESSION_ID", "WINDOWID",
                      "SSH_CLIENT", "SSH_CONNECTION", "SSH_TTY", "SSH_AUTH_SOCK", "PYTEST_CURRENT_TEST"})
# Set to 0 to never use nor write ledgers (the benchmark measures the ordinary unchanged build with it).
SWITCH = "CONCH_BUILD_LEDGER"
_UNTRACED = ("/proc/", "/sys/", "/dev/")
_WRITES = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_IMPORTING = "<frozen importlib._bootstrap_external>"
_METADATA = os.path.join("importlib", "metadata", "__init__.py")  # it lists sys.path folders for distributions
_DISTRIBUTIONS = (".dist-info", ".egg-info", ".egg-link", ".pth")
# What a ledger cannot vouch for: another program's answer (`git describe`, a compiler) or the network's.
_UNTRACEABLE = {"subprocess.Popen": "it ran a program", "os.system": "it ran a program",
                "os.posix_spawn": "it ran a program", "os.exec": "it ran a program", "os.spawn": "it ran a program",
                "socket.connect": "it connected to the network"}
_EVENTS = frozenset({"open", "import", "os.listdir", "os.scandir", "os.rename", "os.remove", "os.rmdir", "os.truncate",
                     "os.chmod", "os.utime", "os.chdir", "os.link", "os.symlink", "shutil.rmtree", *_UNTRACEABLE})


class Trace:
    """What one build command touched, in this process (a forked worker sends its own back). A plain class:
    the ledger's check starts without dataclasses."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.started_ns = time.time_ns()
        self.read: set[str] = set()
        self.listed: set[str] = set()
        self.searched: set[str] = set()  # folders the import system listed
        self.names: set[str] = set()  # the parts of every module name imported, found or not
        self.written: set[str] = set()
        self.lines: list[str] = []  # what the build said, to say again
        self.doubts: list[str] = []  # why no ledger can be kept for this run


_trace: Trace | None = None
_hooked = False
_real_stat, _real_lstat = os.stat, os.lstat


def _path(value: object) -> str | None:
    if isinstance(value, int) or value is None:
        return None
    try:
        return os.path.abspath(os.fsdecode(value))  # type: ignore[arg-type]
    except (TypeError, ValueError, OSError):  # OSError: the working folder is gone
        return None


def _hook(event: str, args: tuple[Any, ...]) -> None:
    trace = _trace
    if trace is None or event not in _EVENTS:
        return
    try:
        _note(trace, event, args)
    except Exception as exc:  # an audit hook that raises would fail the operation it audits: never
        trace.doubts.append(f"tracing {event} failed: {exc!r}")


def _note(trace: Trace, event: str, args: tuple[Any, ...]) -> None:
    if event == "open":
        path, mode, flags = args
        where = _path(path)
        if where is None:
            return
        writes = bool(flags & _WRITES) if mode is None else any(c in mode for c in "wax+")
        (trace.written if writes else trace.read).add(where)
    elif event == "import":
        if isinstance(args[0], str):
            trace.names.update(args[0].split("."))
    elif event in ("os.listdir", "os.scandir"):
        where = _path(args[0] if args and args[0] is not None else ".")
        if where is not None:
            caller = sys._getframe(2).f_code.co_filename  # who listed: above _note and _hook
            importing = caller == _IMPORTING or caller.endswith(_METADATA)
            (trace.searched if importing else trace.listed).add(where)
    elif event == "os.chdir":
        trace.doubts.append("the working folder changed during the build")
    elif event in _UNTRACEABLE:
        trace.doubts.append(_UNTRACEABLE[event])
    elif event in ("os.rename", "os.link", "os.symlink"):
        for value in args[:2]:
            where = _path(value)
            if where is not None:
                trace.written.add(where)
    else:
        where = _path(args[0]) if args else None
        if where is not None:
            trace.written.add(where)


def _noting(real: Any) -> Any:
    """``os.stat`` or ``os.lstat`` that notes the path asked (the metadata a build reads is an input too)."""

    def noted(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        trace = _trace
        if trace is not None and kwargs.get("dir_fd") is None:
            where = _path(path)
            if where is not None:
                trace.read.add(where)
        return real(path, *args, **kwargs)

    return noted


_stat, _lstat = _noting(_real_stat), _noting(_real_lstat)


def enabled() -> bool:
    return os.environ.get(SWITCH, "1") != "0"


def identity(argv: Sequence[str]) -> dict[str, Any]:
    """What makes two runs the same command: everything but the files, which the ledger holds."""
    return {"format": FORMAT, "argv": list(argv), "cwd": os.getcwd(), "executable": sys.executable,
            "version": sys.version, "path": list(sys.path), "flags": repr(sys.flags),
            "xoptions": sorted(map(str, sys._xoptions.items())),
            "env": sorted([k, v] for k, v in os.environ.items() if k not in VOLATILE)}


def _where(ident: dict[str, Any]) -> Path:
    return cache_dir() / "ledgers" / f"{key_of(ident)[:32]}.json"


_identity: dict[str, Any] | None = None


def start(argv: Sequence[str]) -> None:
    """Trace this process from now on for the build command ``argv`` (taken before anything else runs)."""
    global _trace, _hooked, _identity
    if not enabled():
        return
    try:
        _identity = identity(argv)
    except OSError:  # the working folder is gone: no ledger
        return
    if not _hooked:
        sys.addaudithook(_hook)  # hooks cannot be removed: one, switched by _trace
        _hooked = True
    _trace = Trace()
    os.stat, os.lstat = _stat, _lstat


def stop() -> None:
    global _trace, _identity
    _trace, _identity = None, None
    os.stat, os.lstat = _real_stat, _real_lstat


def recording() -> bool:
    return _trace is not None


def doubt(reason: str) -> None:
    """No ledger for this run (what it did cannot be replayed from one)."""
    if _trace is not None:
        _trace.doubts.append(reason)


def said(line: str) -> None:
    """A line the build said while building (a progress note): the fast path says it again."""
    if _trace is not None:
        _trace.lines.append(line)


def take_said() -> list[str]:
    if _trace is None:
        return []
    lines, _trace.lines = _trace.lines, []
    return lines


def traced(wrote: bool = False) -> tuple[tuple[str, str], ...] | None:
    """What a forked build worker touched since the last call, for its outcome: ``()`` in the recording
    process itself (it keeps its own), None where nothing is traced (a spawned worker: then no ledger). Each
    item goes back once per worker (the recording process keeps the union). A job that ``wrote`` its archive
    sends only that: a command that wrote an archive keeps no ledger (see cli/build.py), so the rest would be
    pickled, sent and taken in for nothing (thousands of items a job: a third of a build of 200 small ensembles)."""
    trace = _trace
    if trace is None:
        return None
    if trace.pid == os.getpid():
        return ()
    if wrote:
        take_said()
        return (("doubt", "an archive was written"),)
    try:
        items = [("read", p) for p in trace.read] + [("listed", p) for p in trace.listed]
        items += [("written", p) for p in trace.written] + [("module", p) for p in _module_files()]
        items += [("searched", p) for p in trace.searched | _package_folders()]
        items += [("name", n) for n in trace.names | _module_names()] + [("said", line) for line in take_said()]
        items += [("doubt", reason) for reason in trace.doubts]
        fresh = [item for item in items if item[0] == "said" or item not in _sent]
        _sent.update(fresh)
    except Exception as exc:  # the build succeeded; only its ledger is lost
        return (("doubt", f"a worker's trace failed: {exc!r}"),)
    return tuple(fresh)


_sent: set[tuple[str, str]] = set()  # what this worker's earlier outcomes carried


def absorb(items: tuple[tuple[str, str], ...] | None) -> list[str]:
    """Take in what a worker touched (see traced); returns the lines it said."""
    trace = _trace
    if trace is None:
        return []
    if items is None:
        trace.doubts.append("a build worker was not traced")
        return []
    lines = []
    for kind, value in items:
        if kind == "said":
            lines.append(value)
        elif kind == "doubt":
            trace.doubts.append(value)
        elif kind == "listed":
            trace.listed.add(value)
        elif kind == "searched":
            trace.searched.add(value)
        elif kind == "name":
            trace.names.add(value)
        elif kind == "written":
            trace.written.add(value)
        else:
            trace.read.add(value)
    return lines


def _module_files() -> set[str]:
    """The file each loaded module came from (a ``.pyc`` in ``__pycache__`` stands for its ``.py``)."""
    return {os.path.normpath(file) for module in list(sys.modules.values())
            for file in _strings(module, "__file__") if os.path.isabs(file)}


def _strings(module: object, attribute: str) -> list[str]:
    """A module's ``__file__`` or the folders of its ``__path__``, as strings; nothing for what is not one (torch
    registers modules whose ``__path__`` is an object of its own that cannot be iterated, or raises)."""
    try:
        value = getattr(module, attribute, None)
        values = [value] if isinstance(value, str) or value is None else list(value)
    except Exception:  # anything a module's own __getattr__ raises: it names no file
        return []
    return [v for v in values if isinstance(v, str)]


def _module_names() -> set[str]:
    return {part for name in list(sys.modules) for part in name.split(".")} | {"__init__"}


def _package_folders() -> set[str]:
    """The folders imports searched: every package's and every ``sys.path`` folder (a new file there may
    shadow a module)."""
    folders = {os.path.abspath(p or ".") for p in sys.path if isinstance(p, str)}
    return folders | {os.path.normpath(folder) for module in list(sys.modules.values())
                      for folder in _strings(module, "__path__") if os.path.isabs(folder)}


def _traced(path: str) -> bool:
    return not path.startswith(_UNTRACED) and f"{os.sep}__pycache__{os.sep}" not in path


# An entry: [path, kind, mode, size, mtime_ns, ino, digest or None, settled, link target or None]; mode 0 when the
# path does not exist. Kinds: "f" a file read or a path whose metadata was asked (a folder: only that it is one),
# "l" a folder listed (digest: its names), "m" a folder imports or importlib.metadata searched (digest: its
# names that could be a module imported, found or not, or a distribution's metadata: a new one there would
# shadow or appear). ``settled``: the mtime is far enough
# before the moment the digest was taken that a later write must change it.
Entry = list[Any]


def _margin(st: os.stat_result) -> int:
    return COARSE_MARGIN_NS if st.st_mtime_ns % 1_000_000 == 0 else MARGIN_NS


def _state(path: str) -> tuple[os.stat_result, str | None] | None:
    try:
        st = _real_lstat(path)
        if not stat.S_ISLNK(st.st_mode):
            return st, None
        return _real_stat(path), os.readlink(path)
    except OSError:
        return None


def _content(path: str, kind: str, st: os.stat_result, names: frozenset[str]) -> str | None:
    try:
        if stat.S_ISDIR(st.st_mode):
            listed = os.listdir(path)
            if kind == "m":
                listed = [n for n in listed if n.split(".")[0] in names or n.endswith(_DISTRIBUTIONS)]
            return key_of(sorted(listed)) if kind != "f" else "folder"
        if not stat.S_ISREG(st.st_mode) or st.st_size > DIGEST_LIMIT:
            return None
        with open(path, "rb") as fh:
            return hashlib.sha256(fh.read()).hexdigest()
    except OSError:
        return None


def _whole_digest(path: str) -> str | None:
    try:
        with open(path, "rb") as fh:
            return hashlib.file_digest(fh, "sha256").hexdigest()
    except OSError:
        return None


def _entry(path: str, kind: str, before: dict[tuple[str, str], Entry], seen_ns: int,
           names: frozenset[str]) -> Entry:
    """The state of ``path`` now. ``seen_ns``: when the build may first have read it (its content counts only if
    it did not change after that). Kind "o": an output archive, digested whole only when its mtime is too recent to
    be trusted."""
    state = _state(path)
    if state is None:
        return [path, kind, 0, 0, 0, 0, None, True, None]
    st, link = state
    meta = [st.st_mode, st.st_size, st.st_mtime_ns, st.st_ino]
    old = before.get((path, kind))
    if old is not None and old[2:6] == meta and old[7] and old[8] == link:
        return old
    if kind != "o" and st.st_mtime_ns + _margin(st) > seen_ns:
        return [path, kind, *meta, None, False, link]  # maybe written after the build read it: not trusted
    now = time.time_ns()
    settled = st.st_mtime_ns + _margin(st) <= now
    if kind == "o":  # an archive is compared by its metadata, as its build record is; by content only when racy
        return [path, kind, *meta, None if settled else _whole_digest(path), settled, link]
    return [path, kind, *meta, _content(path, kind, st, names), settled, link]


def _holds(entry: Entry, names: frozenset[str]) -> tuple[bool, Entry | None]:
    """Whether the path is as recorded; and the entry to keep when it holds by content (now settled)."""
    path, kind, mode, size, mtime, ino, digest, settled, link = entry
    state = _state(path)
    if state is None or mode == 0:
        return state is None and mode == 0, None
    st, now_link = state
    if st.st_mode != mode or now_link != link:
        return False, None
    if kind == "f" and stat.S_ISDIR(mode):
        return True, None  # a folder whose metadata was asked: that it is one
    same = [st.st_size, st.st_mtime_ns, st.st_ino] == [size, mtime, ino]
    if same and settled:
        return True, None
    if digest is None or (kind == "o" and not same):
        return False, None
    now = time.time_ns()
    current = _whole_digest(path) if kind == "o" else _content(path, kind, st, names)
    if current != digest:
        return False, None
    return True, [path, kind, st.st_mode, st.st_size, st.st_mtime_ns, st.st_ino, digest,
                  st.st_mtime_ns + _margin(st) <= now, link]


def finish(replay: dict[str, Any], outputs: Iterable[str]) -> None:
    """Keep the ledger of this build command (a successful one): its inputs, its archives (``outputs``) and
    ``replay``, what the fast path needs to say what this command said. A run with doubts keeps none."""
    trace, ident = _trace, _identity
    stop()
    if trace is None or ident is None:
        return
    where = _where(ident)
    if trace.doubts:
        where.unlink(missing_ok=True)
        return
    old = read_json(where)
    before: dict[tuple[str, str], Entry] = {}
    names = frozenset(trace.names | _module_names())
    if isinstance(old, dict) and old.get("format") == FORMAT:  # git's index: unchanged metadata, digest kept
        same_names = frozenset(old.get("names", [])) == names  # a searched folder's digest depends on them
        before = {(entry[0], entry[1]): entry for entry in old.get("entries", []) if entry[1] != "m" or same_names}
    outs = sorted({os.path.abspath(o) for o in outputs})
    written = trace.written | set(outs)
    kinds = {p: "f" for p in trace.read | _module_files() | {sys.executable}}
    kinds.update({p: "m" for p in trace.searched | _package_folders()})
    kinds.update({p: "l" for p in trace.listed})
    kinds.update({p: "o" for p in outs})
    entries = []
    for path, kind in sorted(kinds.items()):
        if _traced(path):
            seen = time.time_ns() + COARSE_MARGIN_NS if path in written else trace.started_ns
            entries.append(_entry(path, kind, before, seen, names))
    write_json(where, {"format": FORMAT, "identity": ident, "names": sorted(names), "entries": entries,
                       "replay": replay})
    _prune(where.parent)


KEPT = 64  # ledgers kept: the commands run last (an environment that differs on every run makes a new one each)


def _prune(folder: Path) -> None:
    ledgers = [(entry.stat().st_mtime_ns, entry.path) for entry in os.scandir(folder) if entry.name.endswith(".json")]
    for _, path in sorted(ledgers)[:-KEPT]:
        with contextlib.suppress(OSError):
            os.unlink(path)


def unchanged(argv: Sequence[str]) -> dict[str, Any] | None:
    """The replay of the ledger of this exact command when every input and output is as recorded; else None
    (no ledger, a damaged one, anything changed: the ordinary build decides)."""
    if not enabled():
        return None
    try:
        ident = identity(argv)
        where = _where(ident)
        ledger = json.loads(where.read_bytes())
        if not isinstance(ledger, dict) or ledger.get("format") != FORMAT or ledger.get("identity") != ident:
            return None
        entries, replay, names = ledger["entries"], ledger["replay"], frozenset(ledger["names"])
        settled: list[tuple[int, Entry]] = []
        for index, entry in enumerate(entries):
            holds, anew = _holds(entry, names)
            if not holds:
                return None
            if anew is not None:
                settled.append((index, anew))
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None  # missing or damaged: the ordinary build writes it again
    if not isinstance(replay, dict):
        return None
    if settled:  # held by content: keep the new metadata, so the next check trusts it again
        for index, anew in settled:
            entries[index] = anew
        write_json(where, ledger)
    return replay
