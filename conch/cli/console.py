"""What every command shares for talking to the user: progress and errors go to stderr, results to stdout."""

from __future__ import annotations

import sys


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
