"""conch serve's exit summary: every count the local MME keeps is printed."""
from __future__ import annotations

from typing import Any

import pytest

from conch.cli.serve import _summary_at_exit


class _Counted:
    """Stands in for LocalMME: only ``counts()`` and ``python_note()`` are read by the summary (no server is needed
    to format a line)."""

    note = ""

    def python_note(self) -> str:
        return self.note

    def counts(self) -> dict[str, Any]:
        return {"step_names": "shared", "restarts": 0, "collisions": 0, "lookup_misses": 2, "lookup_retries": 0,
                "not_ready": 5, "timeouts": 3, "exposed_starts": 1}


def test_the_exit_summary_prints_every_count(capsys: pytest.CaptureFixture[str]) -> None:
    with _summary_at_exit(_Counted()):  # type: ignore[arg-type]
        pass
    err = capsys.readouterr().err
    assert ("served with --step-names shared: 0 tritonserver restarts, 0 step name collisions, 2 'unknown model' "
            "answers (Triton's lookup race), 0 retried, 5 ModelNotReadyException, 3 invocation timeouts, "
            "1 tritonserver starts with its SageMaker port open on every interface") in err



def test_the_exit_summary_says_when_the_stub_was_not_on_the_images_python(capsys: pytest.CaptureFixture[str]) -> None:
    counted = _Counted()
    counted.note = "ran on 3.11; the 24.10 image runs 3.10 (no Python 3.10 found)"
    with _summary_at_exit(counted):  # type: ignore[arg-type]
        pass
    assert "; the Python-backend stub ran on 3.11; the 24.10 image runs 3.10" in capsys.readouterr().err
