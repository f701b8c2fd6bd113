"""conch serve's exit summary: every count the local MME keeps is printed, the hop's resends included."""
from __future__ import annotations

from typing import Any

import pytest

from conch.cli.serve import _summary_at_exit


class _Counted:
    """Stands in for LocalMME: only ``counts()`` is read by the summary (no server is needed to format a line)."""

    def counts(self) -> dict[str, Any]:
        return {"step_names": "shared", "restarts": 0, "collisions": 0, "lookup_misses": 0, "lookup_retries": 0,
                "not_ready": 0, "timeouts": 0, "resends": 3}


def test_the_exit_summary_counts_the_hops_resends(capsys: pytest.CaptureFixture[str]) -> None:
    with _summary_at_exit(_Counted()):  # type: ignore[arg-type]
        pass
    err = capsys.readouterr().err
    assert "0 invocation timeouts, 3 resent on a new connection to Triton (TritonHopResends" in err
