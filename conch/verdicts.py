"""A replay's verdicts: one row per sample and endpoint, each answer judged against the sample's expected outputs
(the local replay and the replay on a deployed endpoint judge alike), and the report's table."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from conch.ensembles.samples import OutputCheck, check_of, compare

BEFORE_LOAD = ("build", "check")  # rows of archives that never reached the server: a user's or a file's fault
PYTHON_ROW = "python"  # the row of an archive whose Python steps ran on another Python than its image's


@dataclass
class ReplayRow:
    ensemble: str
    sample: str
    endpoint: str
    passed: bool
    detail: str
    millis: float = 0.0
    applicable: bool = True  # False: this endpoint cannot carry the sample (detail says why); not a failure

    @property
    def result(self) -> str:
        return "n/a" if not self.applicable else "ok" if self.passed else "FAIL"


@dataclass
class ReplayReport:
    rows: list[ReplayRow] = field(default_factory=list)
    restarts: list[str] = field(default_factory=list)  # each time the server exited and was started again: why

    @property
    def passed(self) -> bool:
        """Every row passed, on a server that never had to be restarted (production would not restart it)."""
        return bool(self.rows) and all(r.passed for r in self.rows) and not self.restarts

    @property
    def errors(self) -> list[ReplayRow]:
        """Archives (or ensembles) that failed before reaching the server."""
        return [r for r in self.rows if r.endpoint in BEFORE_LOAD and not r.passed]

    def tally(self) -> tuple[int, int, int]:
        """(passed, failed, not applicable) rows: a not-applicable row counts as neither passed nor failed."""
        skipped = sum(not r.applicable for r in self.rows)
        passed = sum(r.passed for r in self.rows) - skipped
        return passed, len(self.rows) - passed - skipped, skipped

    def table(self) -> str:
        header = ("ensemble", "sample", "endpoint", "result", "ms", "detail")
        body = [
            (r.ensemble, r.sample, r.endpoint, r.result, f"{r.millis:.1f}", r.detail)
            for r in self.rows
        ]
        widths = [max(len(str(x[i])) for x in [header, *body]) for i in range(5)]
        lines = []
        for row in [header, *body]:
            first = "  ".join(str(v).ljust(w) for v, w in zip(row[:5], widths, strict=True))
            detail = str(row[5]).splitlines() or [""]
            lines.append(f"{first}  {detail[0]}")
            lines.extend(" " * (len(first) + 2) + extra for extra in detail[1:])
        passed, failed, skipped = self.tally()
        lines.append(f"{passed} passed, {failed} failed" + (f", {skipped} not applicable" if skipped else "")
                     + (f"; tritonserver restarted {len(self.restarts)} time(s): {'; '.join(self.restarts)}"
                        if self.restarts else ""))
        other = [r for r in self.rows if r.endpoint == PYTHON_ROW]
        if other:  # never silent: the summary says it too, as "ran on 3.11; the 24.10 image runs 3.10"
            said = sorted({r.detail.partition(" (")[0] for r in other})
            lines.append(f"{len(other)} archive(s) not on their image's Python: {', '.join(said)}")
        return "\n".join(lines)


def not_applicable(name: str, sample: str, endpoint: str, why: str) -> ReplayRow:
    """A row this endpoint cannot run, with the reason: shown as n/a, counted as neither passed nor failed."""
    return ReplayRow(name, sample, endpoint, True, f"not applicable: {why}", applicable=False)


def judge(
    name: str,
    sample: str,
    endpoint: str,
    got: Mapping[str, np.ndarray],
    expected: Mapping[str, np.ndarray],
    checks: OutputCheck | Mapping[str, OutputCheck],
    millis: float,
) -> ReplayRow:
    """Compare every expected output with what an endpoint answered, each with its own check (one check
    for all, or one per output): one row of the report (a sample that expects nothing fails: an archive
    built before conch refused such samples would pass any answer)."""
    if not expected:
        return ReplayRow(name, sample, endpoint, False, "the sample expects no outputs, so nothing was compared; "
                         "declare its expected outputs and rebuild the archive", millis)
    verdicts = []
    for out, want in expected.items():
        if out not in got:
            verdicts.append((False, f"{out}: missing from the response"))
            continue
        check = check_of(checks, out, want)
        c = compare(out, got[out], want, check)
        shown = "" if c.detail.startswith(check.describe()) else f" ({check.describe()})"
        verdicts.append((c.passed, f"{out}: {c.detail}{shown}"))
    passed = all(v[0] for v in verdicts)
    return ReplayRow(name, sample, endpoint, passed, "; ".join(v[1] for v in verdicts), millis)


def replay_document(report: ReplayReport) -> dict[str, Any]:
    """A replay's rows for scripts: each ensemble, sample, endpoint, verdict, time and detail."""
    passed, failed, skipped = report.tally()
    return {"passed": report.passed, "passed_rows": passed, "failed_rows": failed, "not_applicable_rows": skipped,
            "restarts": list(report.restarts),
            "rows": [{"ensemble": r.ensemble, "sample": r.sample, "endpoint": r.endpoint, "passed": r.passed,
                      "applicable": r.applicable, "millis": round(r.millis, 3), "detail": r.detail}
                     for r in report.rows]}
