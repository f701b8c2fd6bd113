"""The parallel build's pool: this process builds its share of the jobs beside the workers, every job is built
once, ``done`` hears of each, and the outcomes come back in job order."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from conch.builder import parallel
from conch.builder.parallel import BuildJob, BuildOutcome, build_all

BUILT_HERE: list[str] = []  # what this process built (a worker appends to its own copy)


def _fake_job(job: BuildJob, progress: object = None) -> BuildOutcome:
    """A job that takes a while (longer in the worker), so neither side can take every job before the other
    starts, however loaded the machine."""
    if os.getpid() == PARENT:
        BUILT_HERE.append(job.ensemble)
    time.sleep(0.02 if os.getpid() == PARENT else 0.1)
    return BuildOutcome(job.ensemble, job.out_dir / f"{job.ensemble}.tar.gz", True, 0.0, error=f"pid {os.getpid()}")


PARENT = os.getpid()


def test_this_process_builds_from_the_back_while_a_worker_builds_from_the_front(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(parallel, "run_job", _fake_job)
    BUILT_HERE.clear()
    jobs = [BuildJob(tmp_path / "e.py", f"e{i}", tmp_path, "local", "24.10") for i in range(8)]
    heard: list[str] = []
    outcomes = build_all(jobs, 2, lambda outcome: heard.append(outcome.ensemble))
    assert [o.ensemble for o in outcomes] == [j.ensemble for j in jobs]
    assert sorted(heard) == sorted(j.ensemble for j in jobs)  # each once
    by = {o.ensemble: o.error for o in outcomes}
    assert by["e7"] == f"pid {PARENT}" and BUILT_HERE[0] == "e7"  # the last job, at once, here
    assert by["e0"] != f"pid {PARENT}"  # the first, by the worker
    assert [f"e{i}" for i in range(7, 7 - len(BUILT_HERE), -1)] == BUILT_HERE  # from the back, in turn
    assert sorted(BUILT_HERE) == sorted(e for e, pid in by.items() if pid == f"pid {PARENT}")


def test_a_failure_while_hearing_of_the_jobs_stops_the_workers_and_goes_on(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """What ``done`` raises (a closed terminal, an interrupt) leaves no worker behind and reaches the caller."""
    import multiprocessing

    monkeypatch.setattr(parallel, "run_job", _fake_job)
    jobs = [BuildJob(tmp_path / "e.py", f"e{i}", tmp_path, "local", "24.10") for i in range(6)]

    def done(outcome: BuildOutcome) -> None:
        if outcome.ensemble == "e4":
            raise RuntimeError("the terminal went away while e4 was reported")

    with pytest.raises(RuntimeError, match="the terminal went away while e4 was reported"):
        build_all(jobs, 2, done)
    assert multiprocessing.active_children() == []
