"""conch's verdict on one small repository per Triton load rule (tests/archive/load_rule_cases.py) equals the verdict
the real tritonserver 2.51 gave (recorded there; confirmed again by test_load_rules_triton.py), names Triton's
cause first and every other cause after it, and refuses nothing Triton loads."""

from __future__ import annotations

from pathlib import Path

import pytest
from load_rule_cases import Case, cases

from conch.archive.check_report import CheckReport
from conch.archive.load_rules import ModelFolder, check_load
from conch.archive.verify import check_folder
from conch.compiler.pbtxt import parse_config

CASES = cases()


def errors_of(case: Case, root: Path, release: str = "24.10") -> list[str]:
    report = check_folder(case.write(root), case.id, release)
    return [f.line(case.id) for f in report.errors]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_conch_judges_each_repository_as_triton_does(tmp_path: Path, case: Case) -> None:
    errors = errors_of(case, tmp_path)
    if case.loads:
        assert errors == [], errors
        return
    assert errors, f"Triton refuses {case.id} ({case.triton}); conch says ok"
    assert case.conch, case.id
    assert case.conch[0] in errors[0], (case.conch[0], errors)  # Triton's cause comes first
    every = "\n".join(errors)
    for words in case.conch[1:]:
        assert words in every, (words, errors)


def test_every_rule_of_the_table_has_a_case() -> None:
    table = (Path(__file__).resolve().parents[2] / "docs" / "load-rules.md").read_text()
    for case in CASES:
        assert f"`{case.id}`" in table, f"docs/load-rules.md has no row naming case {case.id}"


def test_ensembles_in_a_circle_are_named_by_the_load_rules(tmp_path: Path) -> None:
    """SageMaker's front end refuses two ensembles in one archive before Triton loads anything (the archive check
    says so); the load rules, fed the repository as Triton reads it, name the circle Triton refuses."""
    case = next(c for c in CASES if c.id == "ensembles_in_a_circle")
    repo = case.write(tmp_path)
    models = {p.name: ModelFolder.read(p, parse_config((p / "config.pbtxt").read_text(), p.name))
              for p in repo.iterdir()}
    report = CheckReport(case.id)
    check_load(models, case.served, report)
    prefix = case.served.removesuffix("ens")
    assert report.errors[0].message == (f"its steps lead back to it ({prefix}ens -> {prefix}inner -> {prefix}ens): "
                                        "Triton refuses circular dependencies between ensembles; break the loop")
