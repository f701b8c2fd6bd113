"""A replay report's counts: the table's last line and the JSON document count rows alike, a not-applicable row
as neither passed nor failed."""

from __future__ import annotations

from conch.verdicts import ReplayReport, ReplayRow, not_applicable, replay_document


def test_the_table_and_the_document_count_passed_failed_and_not_applicable_rows_alike() -> None:
    report = ReplayReport([ReplayRow("e.tar.gz", "s1", "sagemaker-binary", True, "Y: ok"),
                           ReplayRow("e.tar.gz", "s2", "sagemaker-binary", False, "Y: differs"),
                           not_applicable("e.tar.gz", "s1", "sagemaker-json", "input 'X' is FP16")])
    assert report.tally() == (1, 1, 1)
    assert report.table().endswith("\n1 passed, 1 failed, 1 not applicable")
    doc = replay_document(report)
    assert (doc["passed"], doc["passed_rows"], doc["failed_rows"], doc["not_applicable_rows"]) == (False, 1, 1, 1)
    assert ReplayReport(report.rows[:1]).table().endswith("\n1 passed, 0 failed")
