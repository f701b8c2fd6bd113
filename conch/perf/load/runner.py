"""Start the load generator in processes of its own (a local one, or a master and N workers on loopback),
follow its progress over a pipe and read its records back from a file. Never imports locust."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conch.errors import BenchError
from conch.perf.load.spec import LoadSpec
from conch.scratch import scratch_temp
from conch.triton.kserve_routes import infer_path
from conch.triton.server import die_with_parent

MODULE = "conch.perf.load.locust_proc"
GRACE_S = 180.0  # beyond the stages: spawning, waiting for workers, flushing records


@dataclass
class RunResult:
    spec: LoadSpec
    started: float
    ended: float
    timeline: list[list[float]]  # [wall time, running users]
    records: list[list[Any]]  # [start wall time, latency ms, ok, target index, error]
    workers: int


Progress = Callable[[dict[str, Any]], None]


def locust_command(mode: str, *args: str) -> list[str]:
    return [sys.executable, "-m", MODULE, mode, *args]


def run_load(spec: LoadSpec, *, workers: int = 0, remote_workers: int = 0, bind: str = "127.0.0.1",
             port: int | None = None, progress: Progress | None = None) -> RunResult:
    """Run the stages against the target; ``workers`` > 0 runs a master plus that many worker processes
    here, and waits for ``remote_workers`` more started elsewhere with ``conch bench --worker``."""
    if spec.kind == "kserve":  # a model name no URL reaches is refused by name, before any process starts
        for target in spec.targets:
            infer_path(target.name)
    with scratch_temp("conch-load-") as tmp:
        work = Path(tmp)
        (work / "spec.json").write_text(json.dumps(spec.to_json()))
        out = work / "result.json"
        processes: list[subprocess.Popen[str]] = []
        logs = [(work / "main.log").open("w")]
        try:
            distributed = workers + remote_workers > 0
            # Workers on this machine learn the port from the master, which binds port 0 and reports what it
            # got; only workers elsewhere need a port fixed in advance.
            port = port if remote_workers and port else 0
            main = locust_command(*(("master", "--workers", str(workers + remote_workers), "--bind", bind,
                                     "--port", str(port)) if distributed else ("local",)),
                                  "--spec", str(work / "spec.json"), "--out", str(out))
            processes.append(_spawn(main, logs[0], stdout=True))
            if distributed:
                port = _bound_port(processes[0], work / "main.log", progress)
            for i in range(workers):
                logs.append((work / f"worker{i}.log").open("w"))
                worker = locust_command("worker", "--master-host", "127.0.0.1", "--port", str(port),
                                        "--stop-timeout", str(spec.timeout))
                processes.append(_spawn(worker, logs[-1], stdout=False))
            _follow(processes[0], spec.duration() + spec.timeout + GRACE_S, progress)
            if not out.is_file():
                raise BenchError(f"the load generator wrote no results\n{_tail(work / 'main.log')}")
            data = json.loads(out.read_text())
        finally:
            for process in processes:
                _stop(process)
            for log in logs:
                log.close()
    return RunResult(spec, data["started"], data["ended"], data["timeline"], data["records"], data["workers"])


def _spawn(command: list[str], log: Any, *, stdout: bool) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    # Killed with this thread, also when conch is SIGKILLed: a Locust master or worker must not outlive the run.
    return subprocess.Popen(command, stdout=subprocess.PIPE if stdout else log, stderr=log, stdin=subprocess.DEVNULL,
                            text=True, env=env, start_new_session=True, preexec_fn=die_with_parent)


def _events(process: subprocess.Popen[str], progress: Progress | None) -> Iterator[dict[str, Any] | None]:
    """Each line the generator writes: its JSON event (an error event raised, the others passed on to
    ``progress``), or None for a line that is not one."""
    assert process.stdout is not None
    for line in process.stdout:
        event = None
        with contextlib.suppress(ValueError):
            event = json.loads(line)
        if not isinstance(event, dict):
            yield None
            continue
        if event.get("event") == "error":
            raise BenchError(f"load generator: {event.get('message')}")
        if progress:
            progress(event)
        yield event


def _bound_port(process: subprocess.Popen[str], log: Path, progress: Progress | None) -> int:
    """The port the master bound, from its first event (passed on to ``progress`` like the others)."""
    for event in _events(process, progress):
        if event is not None and event.get("event") == "master":
            return int(event["port"])
    process.wait(timeout=30)
    raise BenchError(f"the load generator wrote no results\n{_tail(log)}")


def _follow(process: subprocess.Popen[str], limit: float, progress: Progress | None) -> None:
    deadline = time.monotonic() + limit
    for _ in _events(process, progress):
        if time.monotonic() > deadline:
            raise BenchError(f"the load generator ran past {limit:.0f} s; stopped it")
    process.wait(timeout=30)


def _stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)
    if process.stdout:
        process.stdout.close()


def _tail(path: Path, lines: int = 30) -> str:
    with contextlib.suppress(OSError):
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    return ""
