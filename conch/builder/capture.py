"""What user and third-party code says while a build runs it (exporting a model, computing a sample's expected
outputs, running the ensemble in-process): Python warnings, prints and progress bars, and what native code
writes to descriptors 1 and 2. A build keeps it per ensemble and says it in one line; ``-v`` and ``--json``
show it in full. When the code fails, what it said is passed on to stderr at once: that is when it helps."""

from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from conch.startup_lines import is_startup_line


@dataclass(frozen=True)
class CapturedOutput:
    """What one piece of user code said: ``what`` names it ("the export of step 'encoder'")."""

    what: str
    warnings: tuple[str, ...] = ()
    lines: tuple[str, ...] = ()

    def to_json(self) -> dict[str, object]:
        return {"what": self.what, "warnings": list(self.warnings), "lines": list(self.lines)}

    def text(self) -> str:
        """Everything, for ``-v``: each warning on its line, then the output as written."""
        return "\n".join([*(f"warning: {w}" for w in self.warnings), *self.lines])


def summary(ensemble: str, captured: Sequence[CapturedOutput]) -> str | None:
    """One line for an ensemble's build ("3 warnings from the export of step 'encoder'; -v shows them"),
    or None when its code said nothing."""
    said = [c for c in captured if c.warnings or c.lines]
    if not said:
        return None
    counts = []
    n_warnings, n_lines = sum(len(c.warnings) for c in said), sum(len(c.lines) for c in said)
    if n_warnings:
        counts.append(f"{n_warnings} warning{'s' if n_warnings != 1 else ''}")
    if n_lines:
        counts.append(f"{n_lines} line{'s' if n_lines != 1 else ''} of output")
    whats = list(dict.fromkeys(c.what for c in said))
    named = whats[:3] + ([f"{len(whats) - 3} more"] if len(whats) > 3 else [])
    where = named[0] if len(named) == 1 else f"{', '.join(named[:-1])} and {named[-1]}"
    return f"ensemble {ensemble!r}: {' and '.join(counts)} from {where}; -v shows them"


@contextlib.contextmanager
def captured(what: str, into: list[CapturedOutput]) -> Iterator[None]:
    """Within the block, warnings, ``sys.stdout``/``sys.stderr`` and descriptors 1 and 2 go to a temporary
    file; afterwards what was said is appended to ``into`` (nothing when nothing was said). On an exception
    it is written to stderr before the exception goes on."""
    with tempfile.TemporaryFile() as sink, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")  # each distinct warning once, as Python shows them by default
        failed = False
        try:
            with _descriptors_to(sink.fileno()):
                yield
        except BaseException:
            failed = True
            raise
        finally:
            sink.seek(0)
            lines = tuple(_last_frame(line.decode("utf-8", "replace"))
                          for line in sink.read().split(b"\n") if line.strip() and not is_startup_line(line))
            said = tuple(dict.fromkeys(f"{w.category.__name__}: {w.message} ({w.filename}:{w.lineno})"
                                       for w in caught))
            if said or lines:
                out = CapturedOutput(what, said, lines)
                if failed:
                    print(out.text(), file=sys.stderr, flush=True)
                else:
                    into.append(out)


def _last_frame(line: str) -> str:
    """A progress bar redraws itself with carriage returns: keep its last frame."""
    frames = [frame for frame in line.split("\r") if frame.strip()]
    return frames[-1] if frames else line


@contextlib.contextmanager
def _descriptors_to(fileno: int) -> Iterator[None]:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    saved: list[tuple[int, int]] = []
    try:
        for fd in (1, 2):
            try:
                saved.append((fd, os.dup(fd)))
            except OSError:  # no such descriptor (a daemon): Python-level capture still holds
                continue
            os.dup2(fileno, fd)
        text = io.TextIOWrapper(open(os.dup(fileno), "wb", buffering=0), encoding="utf-8", errors="replace",  # noqa: SIM115
                                write_through=True)
        try:
            with contextlib.redirect_stdout(text), contextlib.redirect_stderr(text):
                yield
        finally:
            text.close()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        for fd, copy in saved:
            os.dup2(copy, fd)
            os.close(copy)
