"""What every command shares for talking to the user: results on stdout, progress and errors on stderr.

Every command but `inspect` takes ``--json`` (one JSON document on stdout, or JSON lines for a streaming
command, and nothing else there) and ``--quiet`` (only errors). Progress bars are drawn on stderr only
when it is a terminal; elsewhere (CI logs, pipes) the same progress comes as the ordinary lines."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

ERROR = "conch: error"


class _Session:
    """The output flags in force."""

    def __init__(self) -> None:
        self.json = False
        self.quiet = False
        self.out: IO[str] | None = None  # the real stdout while --json or --quiet sends everything else elsewhere
        self.bar: Any = None  # the live rich Progress, so lines print above it instead of through it
        self.terminal: bool | None = None  # stderr was a terminal before the start-up line filter replaced it
        self.columns = 80


_session = _Session()


def add_output_flags(parser: argparse.ArgumentParser) -> None:
    """``--json`` and ``--quiet`` for one command (dests ``json_output``/``quiet`` so a command's own
    ``--json`` of another meaning cannot collide)."""
    group = parser.add_argument_group("output for scripts")
    group.add_argument("--json", dest="json_output", action="store_true",
                       help="print one JSON document on stdout (JSON lines for a streaming command) and nothing "
                            "else there; messages stay on stderr")
    group.add_argument("-q", "--quiet", action="store_true", help="print only errors")


@contextmanager
def session(args: argparse.Namespace) -> Iterator[None]:
    """Run one command with its output flags in force. Under ``--json`` anything else written to stdout
    (a library's print, a child process) goes to stderr; under ``--quiet`` it goes nowhere."""
    json_output, quiet = bool(getattr(args, "json_output", False)), bool(getattr(args, "quiet", False))
    if not (json_output or quiet):
        yield
        return
    sys.stdout.flush()
    saved_fd, saved_stdout = os.dup(1), sys.stdout
    sink = os.open(os.devnull, os.O_WRONLY) if not json_output else os.dup(2)
    os.dup2(sink, 1)
    os.close(sink)
    _session.json, _session.quiet = json_output, quiet
    _session.out = os.fdopen(os.dup(saved_fd), "w", encoding="utf-8")
    sys.stdout = sys.stderr if json_output else open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115
    try:
        yield
    finally:
        if sys.stdout is not sys.stderr:
            sys.stdout.close()
        sys.stdout = saved_stdout
        _session.out.close()
        os.dup2(saved_fd, 1)
        os.close(saved_fd)
        _session.json = _session.quiet = False
        _session.out = None


def quiet_mode() -> bool:
    return _session.quiet


def say(message: str) -> None:
    """A progress or status line on stderr; under ``--quiet`` only errors get through."""
    if _session.quiet and not message.startswith(ERROR):
        return
    if _session.bar is not None:
        _session.bar.console.print(message, markup=False, highlight=False, soft_wrap=True)
    else:
        print(message, file=sys.stderr, flush=True)


def error(message: str) -> None:
    """One ``conch: error:`` line, whatever the output flags."""
    say(message if message.startswith(ERROR) else f"{ERROR}: {message}")


def result(text: str) -> None:
    """What a command found, for people: stdout, unless ``--json`` or ``--quiet``."""
    if not (_session.json or _session.quiet):
        print(text, flush=True)


def document(doc: Any) -> None:
    """The command's JSON document (or one JSON line of a stream): stdout, only under ``--json``."""
    if _session.json and _session.out is not None:
        _session.out.write(json.dumps(doc, default=str) + "\n")
        _session.out.flush()


@contextmanager
def startup_lines_filtered() -> Iterator[None]:
    """The command's stderr through conch.startup_lines' filter (TensorFlow may load its native library at any
    point of a build, not only when a file imports it); whether stderr is a terminal is read first."""
    import shutil

    from conch.startup_lines import startup_lines_dropped

    _session.terminal = sys.stderr.isatty()
    _session.columns = shutil.get_terminal_size().columns
    try:
        with startup_lines_dropped():
            yield
    finally:
        _session.terminal = None


def live_rows() -> bool:
    """Whether a command shows each row as it comes before the table that holds them all: only when that table
    goes to a terminal. Into a file, a pipe or a CI log each row is printed once, in the table."""
    return not (_session.json or _session.quiet) and sys.stdout.isatty()


def bars_shown() -> bool:
    """Progress bars only for a person at a terminal: not under ``--quiet``, not into a pipe or a CI log."""
    terminal = sys.stderr.isatty() if _session.terminal is None else _session.terminal
    return not _session.quiet and terminal


class Bar:
    """One task of a progress bar; does nothing when bars are not shown."""

    def __init__(self, progress: Any, task: Any, description: str = "") -> None:
        self._progress, self._task, self._description = progress, task, description

    def advance(self, amount: float = 1) -> None:
        if self._progress is not None:
            self._progress.advance(self._task, amount)

    def note(self, message: str) -> None:
        """Say ``message`` and show it beside the bar while the step it names runs (packing an environment
        is one pip run with nothing to count: the spinner and this text are its progress)."""
        say(message)
        short = message if len(message) <= 60 else message[:57] + "..."
        if self._progress is not None:
            self._progress.update(self._task, description=f"{self._description}: {short}")

    def line(self, message: str) -> None:
        """Say ``message`` and count one more done (a progress callback that ticks)."""
        say(message)
        self.advance()


@contextmanager
def progress_bar(description: str, total: float | None, *, bytes_: bool = False) -> Iterator[Bar]:
    """A rich progress bar on stderr for the duration of the block (when ``bars_shown()``)."""
    if not bars_shown() or _session.bar is not None:
        yield Bar(None, None)
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    count = DownloadColumn() if bytes_ else MofNCompleteColumn()
    sys.stderr.flush()
    # the bar keeps its own copy of stderr: a build captures descriptor 2 while user code runs
    # (conch.builder.capture), and the bar's redraws are not the user code's output
    terminal = os.fdopen(os.dup(sys.stderr.fileno()), "w", encoding="utf-8")
    progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), count, TimeElapsedColumn(),
                        console=Console(file=terminal, force_terminal=True, width=_session.columns), transient=True)
    try:
        with progress:
            _session.bar = progress
            try:
                yield Bar(progress, progress.add_task(description, total=total), description)
            finally:
                _session.bar = None
    finally:
        terminal.close()


@contextmanager
def quiet_tensorflow() -> Iterator[None]:
    """Keep TensorFlow's C++ log lines at warnings and above out of a command's output, here and in every
    process started meanwhile (build workers, tritonserver and its stubs inherit the environment); its start-up
    lines, which no log level reaches, are dropped where TensorFlow is imported (conch.startup_lines). A value
    the user set wins; what was set here is unset afterwards, so a program calling ``main()`` keeps its own
    environment. TensorFlow's numerics (oneDNN) are left as they are: archives built from the CLI and from
    Python must carry the same expected outputs."""
    wanted = {"TF_CPP_MIN_LOG_LEVEL": "2"}
    added = [name for name in wanted if name not in os.environ]
    os.environ.update({name: wanted[name] for name in added})
    import logging

    for name in ("tensorflow", "absl"):
        logging.getLogger(name).setLevel(logging.ERROR)
    try:
        yield
    finally:
        for name in added:
            os.environ.pop(name, None)
