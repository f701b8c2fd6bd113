"""A replay's rows as JUnit XML (`conch replay --junit-xml PATH`), for CI systems that read it and harnesses that
do not run pytest: one ``testsuite`` per ensemble (TargetModel), one ``testcase`` per sample and endpoint named
as the pytest plugin names its items (``ensemble[sample @ endpoint]``), a ``failure`` holding the check's figures,
``skipped`` for an endpoint that cannot carry a sample. Written with the standard library's ElementTree."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from conch.verdicts import ReplayReport, ReplayRow


def item_name(ensemble: str, sample: str, endpoint: str) -> str:
    """``text_embeddings[hello @ kserve]``: one sample through one endpoint (the pytest plugin's item names; the
    bracket closes the name, as pytest's node ids and its JUnit report expect of parameters)."""
    return f"{ensemble.removesuffix('.tar.gz')}[{sample} @ {endpoint}]"


def junit_tree(report: ReplayReport, suite_prefix: str = "conch replay") -> ET.Element:
    """The ``<testsuites>`` element holding one ``<testsuite>`` per ensemble, in the rows' order."""
    suites: dict[str, list[ReplayRow]] = {}
    for row in report.rows:
        suites.setdefault(row.ensemble.removesuffix(".tar.gz"), []).append(row)
    root = ET.Element("testsuites", name=suite_prefix)
    for ensemble, rows in suites.items():
        failures = sum(r.applicable and not r.passed for r in rows)
        skipped = sum(not r.applicable for r in rows)
        seconds = sum(r.millis for r in rows) / 1000
        suite = ET.SubElement(root, "testsuite", name=f"{suite_prefix}: {ensemble}", tests=str(len(rows)),
                              failures=str(failures), errors="0", skipped=str(skipped), time=f"{seconds:.3f}")
        for row in rows:
            case = ET.SubElement(suite, "testcase", classname=ensemble, time=f"{row.millis / 1000:.3f}",
                                 name=item_name(row.ensemble, row.sample, row.endpoint))
            if not row.applicable:
                ET.SubElement(case, "skipped", message=row.detail)
            elif not row.passed:
                failure = ET.SubElement(case, "failure", message=row.detail.splitlines()[0] if row.detail else "failed")
                failure.text = row.detail
    for key in ("tests", "failures", "errors", "skipped"):
        root.set(key, str(sum(int(suite.get(key, 0)) for suite in root)))
    root.set("time", f"{sum(r.millis for r in report.rows) / 1000:.3f}")
    return root


def write_junit(report: ReplayReport, path: Path) -> None:
    """Write the report's JUnit XML to ``path`` atomically."""
    from conch.atomic_write import write_bytes_atomic

    root = junit_tree(report)
    ET.indent(root)
    write_bytes_atomic(path, ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n")
