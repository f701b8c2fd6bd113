"""A live progress display for a load run (rich, on stderr): stage, users, requests, failures, req/s."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from conch.perf.load.runner import Progress
from conch.perf.load.spec import LoadSpec
from conch.perf.load.stages import stage_index


@contextmanager
def load_progress(spec: LoadSpec) -> Iterator[Progress]:
    """Yields a callback for the load generator's progress events; draws a bar over the whole run."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    console = Console(file=sys.stderr)
    columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[status]}"),
               TimeRemainingColumn())
    with Progress(*columns, console=console, transient=not console.is_terminal) as bar:
        task = bar.add_task("load", total=spec.duration(), status="starting")

        def update(event: dict[str, Any]) -> None:
            if event.get("event") == "master":
                bar.update(task, status=f"master on port {event['port']}, waiting for workers")
            if event.get("event") != "progress":
                return
            index = stage_index(spec.stages, event["elapsed"])
            stage = f"stage {index + 1}/{len(spec.stages)}" if index is not None else "stopping"
            bar.update(task, completed=min(event["elapsed"], spec.duration()), description=stage,
                       status=f"{event['users']} users  {event['requests']} requests  {event['failures']} failed  "
                              f"{event['rps']:.1f} req/s")

        yield update
