"""Many deadlines on one loop timer: each fires when its time comes (not before, and within the timer's resolution
after), a discarded one never fires, and the ones left after a sweep still fire; on asyncio's loop and on uvloop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import uvloop

from conch.harness.endpoint.deadlines import SLACK_S, Deadlines

LATE_S = 0.15  # how late a fire may be on a loaded machine


def on_each_loop(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(main())
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main())


def test_each_deadline_fires_at_its_time_and_a_discarded_one_never() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        deadlines = Deadlines(loop)
        start = loop.time()
        fired: dict[str, float] = {}
        for name, after in (("late", 0.3), ("early", 0.1), ("gone", 0.05), ("middle", 0.2)):
            deadlines.add(name, start + after, lambda name=name: fired.__setitem__(name, loop.time() - start))
        deadlines.discard("gone")
        await asyncio.sleep(0.45)
        assert sorted(fired, key=fired.__getitem__) == ["early", "middle", "late"]
        for name, after in (("early", 0.1), ("middle", 0.2), ("late", 0.3)):
            assert after - SLACK_S <= fired[name] < after + LATE_S, (name, fired[name])
        assert not deadlines.due

    on_each_loop(main)


def test_a_key_added_again_keeps_its_last_deadline_and_an_earlier_one_rearms_the_timer() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        deadlines = Deadlines(loop)
        start = loop.time()
        fired: list[tuple[str, float]] = []
        deadlines.add("a", start + 0.05, lambda: fired.append(("a first", loop.time() - start)))
        deadlines.add("a", start + 0.25, lambda: fired.append(("a", loop.time() - start)))  # the timer fires early
        deadlines.add("b", start + 0.5, lambda: fired.append(("b", loop.time() - start)))
        deadlines.add("c", start + 0.1, lambda: fired.append(("c", loop.time() - start)))  # before the armed time
        await asyncio.sleep(0.65)
        assert [name for name, _ in fired] == ["c", "a", "b"]
        for (_, at), after in zip(fired, (0.1, 0.25, 0.5), strict=True):
            assert after - SLACK_S <= at < after + LATE_S

    on_each_loop(main)


def test_a_failing_callback_is_reported_and_the_others_still_fire() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        reported: list[dict[str, Any]] = []
        loop.set_exception_handler(lambda _, context: reported.append(context))
        deadlines = Deadlines(loop)
        fired: list[str] = []
        when = loop.time() + 0.05
        deadlines.add("bad", when, lambda: 1 / 0)
        deadlines.add("good", when, lambda: fired.append("good"))
        await asyncio.sleep(0.2)
        assert fired == ["good"]
        assert isinstance(reported[0]["exception"], ZeroDivisionError)

    on_each_loop(main)


def test_close_drops_every_deadline() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        deadlines = Deadlines(loop)
        fired: list[int] = []
        deadlines.add(1, loop.time() + 0.05, lambda: fired.append(1))
        deadlines.close()
        await asyncio.sleep(0.15)
        assert fired == [] and not deadlines.due

    on_each_loop(main)


@pytest.mark.parametrize("count", [1, 50])
def test_many_deadlines_at_the_same_time_fire_in_the_order_added(count: int) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        deadlines = Deadlines(loop)
        fired: list[int] = []
        when = loop.time() + 0.05
        for i in range(count):
            deadlines.add(i, when, lambda i=i: fired.append(i))
        await asyncio.sleep(0.2)
        assert fired == list(range(count))

    on_each_loop(main)
