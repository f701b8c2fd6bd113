"""Build many ensembles over every core: one process per job slot, each re-importing the ensemble's
file by path (ensembles are user objects, not something to pickle). Each archive is written by exactly
one process from the same inputs, so the bytes do not depend on the number of jobs."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from conch.builder.capture import CapturedOutput
from conch.builder.pack import Progress
from conch.errors import BuildError, ConchError
from conch.scratch import die_with_parent


@dataclass(frozen=True)
class BuildJob:
    """One ensemble to build: the file that declares it, its name, and how to build it."""

    source: Path
    ensemble: str
    out_dir: Path
    target: str
    release: str
    refresh: bool = False
    repo_dir: Path | None = None


@dataclass(frozen=True)
class BuildOutcome:
    ensemble: str
    archive: Path | None
    written: bool
    seconds: float
    error: str | None = None
    output: tuple[CapturedOutput, ...] = ()  # what the ensemble's code said while it was built


def default_jobs() -> int:
    """Every core this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def run_job(job: BuildJob, progress: Progress | None = None) -> BuildOutcome:
    """Build one ensemble in this process; any failure becomes the outcome's error (the others still build)."""
    from conch.builder.discover import load_module_ensembles
    from conch.builder.repository_build import render_repository, write_if_changed, write_repository

    start = time.perf_counter()
    try:
        # a file already imported in this process (a fork inherits it) is looked through, not imported again
        ensemble = next((e for e in load_module_ensembles(job.source) if e.name == job.ensemble), None)
        if ensemble is None:
            raise BuildError(f"{job.source}: no ensemble named {job.ensemble!r} when imported again")
        repo = render_repository(ensemble, job.target, job.release, progress, job.refresh)
        path, written = write_if_changed(repo, job.out_dir)
        if job.repo_dir is not None:
            write_repository(repo, job.repo_dir / job.ensemble)
    except ConchError as exc:
        return BuildOutcome(job.ensemble, None, False, time.perf_counter() - start, str(exc))
    except Exception as exc:  # a crash in user code or a bug: one line, and the other ensembles still build
        return BuildOutcome(job.ensemble, None, False, time.perf_counter() - start,
                            f"ensemble {job.ensemble!r}: {type(exc).__name__}: {exc}")
    return BuildOutcome(job.ensemble, path, written, time.perf_counter() - start, output=tuple(repo.output))


def _before_fork() -> None:
    """What every job needs and that starts no thread, done once here so that forked workers inherit it instead of
    each doing it again: the build's modules and the templates' jinja2 environment (~0.1 s of CPU per worker)."""
    from conch.builder import repository_build  # noqa: F401
    from conch.templates import environment

    environment()


def _prefixed(ensemble: str, message: str) -> None:
    print(f"{ensemble}: {message}", file=sys.stderr, flush=True)


def _die_with(parent: int) -> None:
    """A worker's initializer: killed when the command dies, also by SIGKILL or by a SIGTERM that Python does not
    handle (a worker waiting for a job, or stuck in a model's native code, would otherwise outlive it, orphaned)."""
    if sys.platform == "linux":
        with contextlib.suppress(OSError, AttributeError):
            die_with_parent()
    if os.getppid() != parent:  # the command died before the line above took effect
        os._exit(1)


def _context() -> multiprocessing.context.BaseContext:
    # fork starts workers in milliseconds and they inherit the imported ensembles; elsewhere workers
    # import the files again by path (run_job does both).
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods else "spawn")


def build_all(
    jobs: Sequence[BuildJob],
    workers: int,
    done: Callable[[BuildOutcome], None],
    progress: Progress | None = None,
) -> list[BuildOutcome]:
    """Build every job, ``workers`` at a time (each in a worker process); ``done`` hears of each ensemble as it
    finishes. Outcomes come back in job order. With one worker (or one job) everything
    runs in this process.

    ``progress`` hears the steps of a serial build; parallel workers print theirs, prefixed, to stderr (none
    when ``progress`` is None)."""
    if workers <= 1 or len(jobs) <= 1:
        outcomes = []
        for job in jobs:
            outcomes.append(run_job(job, progress))
            done(outcomes[-1])
        return outcomes
    # The workers are forked (at the first submit) before anything is built: a build runs the user's models, and a
    # process forked after a framework started its threads (torch's OpenMP pool, ONNX Runtime's) can wait forever
    # in the child for a lock a thread of the parent held (tests/builder/test_parallel_fork.py). They are forked by
    # this thread, which waits for them in shutdown below: the death signal (sent when the forking thread ends)
    # fires only when the command dies.
    _before_fork()
    pool = ProcessPoolExecutor(max_workers=min(workers, len(jobs)), mp_context=_context(),
                               initializer=_die_with, initargs=(os.getpid(),))
    results: dict[int, BuildOutcome] = {}
    try:
        futures = {pool.submit(run_job, job, partial(_prefixed, job.ensemble) if progress else None): index
                   for index, job in enumerate(jobs)}
        for future in as_completed(futures):
            results[futures[future]] = future.result()
            done(results[futures[future]])
    except BaseException:
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    return [results[i] for i in range(len(jobs))]
