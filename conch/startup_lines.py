"""Native libraries' start-up lines kept out of conch's output without changing what the libraries compute.

TensorFlow 2.x writes absl's "before absl::InitializeLog()" warning, the oneDNN notice and the CPU-feature
notice straight to file descriptor 2 while it is imported, before any log level applies. Turning oneDNN off
(``TF_ENABLE_ONEDNN_OPTS=0``) would silence it but changes TensorFlow's numerics, so expected outputs (and
archive bytes) would depend on which entry point built them. Instead, while an ensemble file or TensorFlow
is imported, descriptor 2 goes through a pipe that drops exactly those lines and passes everything else on.
"""

from __future__ import annotations

import os
import re
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

STARTUP_LINE = re.compile(
    rb"^(WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    rb"|[IW]\d{4} [\d:. ]+\d+ (port|cpu_feature_guard|cpu_utils)\.cc:\d+\] .*"
    rb"|To enable the following instructions: .*in other operations, rebuild TensorFlow .*)\r?\n?$"
)


def is_startup_line(line: bytes) -> bool:
    """True for one of the native start-up lines conch drops (and nothing a user's code prints)."""
    return STARTUP_LINE.match(line) is not None


_active = 0  # blocks open now: descriptor 2 is process-wide, so only the outermost one sets up a filter
_active_lock = threading.Lock()


@contextmanager
def startup_lines_dropped() -> Iterator[None]:
    """Within the block, lines written to descriptor 2 pass through a filter dropping native start-up lines.
    Inside another such block (every ensemble file's import under a ``conch`` command) it adds nothing."""
    global _active
    with _active_lock:
        _active += 1
        nested = _active > 1
    try:
        if nested:
            yield
        else:
            with _filtered():
                yield
    finally:
        with _active_lock:
            _active -= 1


@contextmanager
def _filtered() -> Iterator[None]:
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no descriptor 2 (a daemon, a closed stderr): nothing to filter
        yield
        return
    read_end, write_end = os.pipe()
    os.dup2(write_end, 2)
    os.close(write_end)
    pump = threading.Thread(target=_pump, args=(read_end, os.dup(saved)), name="conch-startup-lines", daemon=True)
    pump.start()
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)  # the pipe's last write end goes: the pump reads to its end and stops
        os.close(saved)
        pump.join(timeout=2)  # a child process the block started may still hold the pipe; it drains later


def _pump(read_end: int, target: int) -> None:
    with os.fdopen(read_end, "rb", buffering=0) as source, os.fdopen(target, "wb", buffering=0) as sink:
        pending = b""
        while chunk := source.read(65536):
            pending += chunk
            *lines, pending = pending.split(b"\n")
            kept = b"".join(line + b"\n" for line in lines if not is_startup_line(line + b"\n"))
            if kept:
                sink.write(kept)
        if pending and not is_startup_line(pending):
            sink.write(pending)
