"""The parallel build's pool: the workers build every job once, ``done`` hears of each, and the outcomes come
back in job order."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from conch.builder import parallel
from conch.builder.parallel import BuildJob, BuildOutcome, build_all


def _fake_job(job: BuildJob, progress: object = None) -> BuildOutcome:
    time.sleep(0.02)
    return BuildOutcome(job.ensemble, job.out_dir / f"{job.ensemble}.tar.gz", True, 0.0, error=f"pid {os.getpid()}")


PARENT = os.getpid()


def test_the_workers_build_every_job_once_and_the_outcomes_come_in_job_order(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(parallel, "run_job", _fake_job)
    jobs = [BuildJob(tmp_path / "e.py", f"e{i}", tmp_path, "local", "24.10") for i in range(8)]
    heard: list[str] = []
    outcomes = build_all(jobs, 2, lambda outcome: heard.append(outcome.ensemble))
    assert [o.ensemble for o in outcomes] == [j.ensemble for j in jobs]
    assert sorted(heard) == sorted(j.ensemble for j in jobs)  # each once
    assert f"pid {PARENT}" not in {o.error for o in outcomes}  # this process forks the workers and builds nothing


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
