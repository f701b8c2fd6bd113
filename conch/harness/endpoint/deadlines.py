"""Many deadlines on one event-loop timer: the hop's per-call timeout and uvicorn's keep-alive, without a timer
made and cancelled on every call (a libuv timer handle under uvloop each time).

The timer is armed for the earliest deadline held; when it fires, every deadline due by then fires (in the order
they were added) and the timer is armed for the earliest one left. A deadline fires when its time comes, within the
loop's timer resolution, as ``loop.call_at`` would; one discarded before then never fires.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Hashable

SLACK_S = 0.001  # libuv's timers count whole milliseconds: a timer may run up to this much before its time


class Deadlines:
    """``add(key, when, fire)``: call ``fire()`` at loop time ``when`` unless ``discard(key)`` comes first."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.due: dict[Hashable, tuple[float, Callable[[], object]]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._armed = math.inf

    def add(self, key: Hashable, when: float, fire: Callable[[], object]) -> None:
        """Hold ``fire`` for ``when`` (a key added again keeps its last deadline only)."""
        self.due[key] = (when, fire)
        if when < self._armed:
            self._arm(when)

    def discard(self, key: Hashable) -> None:
        self.due.pop(key, None)

    def close(self) -> None:
        """Drop every deadline (none fires) and the timer."""
        self.due.clear()
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._armed = None, math.inf

    def _arm(self, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._armed = self.loop.call_at(when, self._sweep), when

    def _sweep(self) -> None:
        self._timer, self._armed = None, math.inf
        now = self.loop.time() + SLACK_S
        due = [(key, fire) for key, (when, fire) in self.due.items() if when <= now]
        for key, _ in due:
            del self.due[key]
        if self.due:
            self._arm(min(when for when, _ in self.due.values()))
        for _, fire in due:
            try:
                fire()
            except Exception as exc:  # the others still fire; reported as a failed loop callback would be
                self.loop.call_exception_handler({"message": "a deadline's callback failed", "exception": exc})
