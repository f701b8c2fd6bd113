"""conch's load rules against Triton's own documented verdicts: the ensemble repositories of the server's QA test
qa/L0_model_config (autofill_noplatform/ensemble: refused, each with the words Triton must say in `expected`;
autofill_noplatform_success/ensemble: loaded), read from a checkout of triton-inference-server/server at a
release branch. Version folders are made as the QA script makes them (every `.../1` its loops name). Prints one
row per repository and the agreement.

    python benchmarks/triton_qa_verdicts.py --server-git PATH/server/.git --ref r24.10
"""

from __future__ import annotations

import argparse
import re
import subprocess
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

from conch.archive.check_report import CheckReport
from conch.archive.load_rules import ModelFolder, check_load
from conch.compiler.pbtxt import ConfigParseError, parse_config

QA = "qa/L0_model_config"


def unpack(git_dir: str, ref: str, dest: Path) -> Path:
    """The QA folder of ``ref`` under ``dest`` (git archive; the tree's files only, nothing else of the repo)."""
    tar = subprocess.run(["git", f"--git-dir={git_dir}", "archive", ref, f"{QA}/autofill_noplatform/ensemble",
                          f"{QA}/autofill_noplatform_success/ensemble", f"{QA}/test.sh"],
                         check=True, capture_output=True).stdout
    with tarfile.open(fileobj=BytesIO(tar)) as archive:
        archive.extractall(dest, filter="data")
    root = dest / QA
    for version in re.findall(r"(autofill_noplatform(?:_success)?/ensemble/\S+/1)\b", (root / "test.sh").read_text()):
        (root / version).mkdir(parents=True, exist_ok=True)
    return root


def verdict(case: Path) -> tuple[bool, str]:
    """(refused, conch's first finding) for the ensemble named like ``case``."""
    report = CheckReport(case.name)
    models = {}
    # a case is a repository of model folders, or (a config.pbtxt of its own) the one model itself
    folders = [case] if (case / "config.pbtxt").is_file() else sorted(p for p in case.iterdir()
                                                                       if (p / "config.pbtxt").is_file())
    for folder in folders:
        try:
            text = (folder / "config.pbtxt").read_text()
            models[folder.name] = ModelFolder.read(folder, parse_config(text, f"{folder.name}/config.pbtxt"))
        except ConfigParseError as exc:
            report.error(f"{folder.name}/config.pbtxt", f"does not parse: {exc.reason}")
    if case.name in models:
        check_load(models, case.name, report)
    errors = report.errors
    return bool(errors), (errors[0].message if errors else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server-git", required=True, help="the git directory of a triton-inference-server/server "
                        "clone")
    parser.add_argument("--ref", default="r24.10", help="the release branch or tag (default r24.10, server 2.51)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = unpack(args.server_git, args.ref, Path(tmp))
        agree = total = 0
        for kind, refused_by_triton in (("autofill_noplatform", True), ("autofill_noplatform_success", False)):
            for case in sorted((root / kind / "ensemble").iterdir()):
                refused, first = verdict(case)
                expected = ""
                for e in sorted(case.rglob("expected*")):
                    expected += e.read_text().strip() + " | "
                total += 1
                agree += refused == refused_by_triton
                mark = "agree" if refused == refused_by_triton else "DIFFER"
                fate = "refused" if refused_by_triton else "loads"
                print(f"{mark:6}  {fate:7}  {case.name:32}  triton: {expected[:90]!r}\n{'':50}conch:  {first[:110]!r}")
        print(f"\n{agree} of {total} verdicts agree with Triton's ({args.ref})")


if __name__ == "__main__":
    main()
