"""The README and the pages in docs/ say what works: their relative links lead to files, and their code blocks
marked as runnable run. The convention (said at the end of the README): a ```bash block preceded by
``<!-- runs: quick -->`` runs in the default test run, by ``<!-- runs: slow -->`` with ``-m slow``; other
blocks are reference (they need AWS, a GPU, or run until Ctrl-C). Each block runs with ``bash -euo pipefail``
in a folder of its own holding ``ensembles/`` (the examples), with ``conch`` on PATH."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKED = re.compile(r"<!-- runs: (quick|slow) -->\n```bash\n(.*?)```", re.S)
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
# pages the README links that other work adds (they exist once it is merged)


def _blocks(kind: str) -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        for n, (marked, code) in enumerate(MARKED.findall(page.read_text())):
            if marked == kind:
                found.append((f"{page.relative_to(ROOT)}#{n}", code))
    return found


def test_the_first_two_blocks_are_what_ci_runs() -> None:
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```[a-z]*\n(.*?)```", readme, re.S)
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert blocks[1].strip().splitlines()[-1] == ci
    assert ".venv/bin/conch build ensembles/ --target local --out dist/ && .venv/bin/conch replay dist/" in blocks[0]


def test_every_relative_link_leads_to_a_file() -> None:
    broken, checked = [], 0
    for page in PAGES:
        for target in LINK.findall(page.read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            checked += 1
            path = (page.parent / target).resolve()
            if not path.exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not broken
    assert checked >= len(PAGES) - 1  # the README links every docs page: the link pattern finds them


def test_every_docs_page_is_linked_from_the_readme() -> None:
    readme = (ROOT / "README.md").read_text()
    unlinked = [p.name for p in PAGES[1:] if f"](docs/{p.name})" not in readme]
    assert not unlinked


def _run(code: str, tmp_path: Path, timeout: float) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "conch"
    shim.write_text(f"#!/bin/sh\nexec {sys.executable} -m conch.cli \"$@\"\n")
    shim.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    (work / "ensembles").symlink_to(ROOT / "ensembles")
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(["bash", "-euo", "pipefail", "-c", code], cwd=work, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:
        with contextlib.suppress(ProcessLookupError):  # a server the block started in the background goes too
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait()
    assert proc.returncode == 0, f"{code}\n---\n{out}"


@pytest.mark.parametrize(("where", "code"), _blocks("quick"), ids=[w for w, _ in _blocks("quick")])
def test_quick_blocks_run(where: str, code: str, tmp_path: Path) -> None:
    _run(code, tmp_path, timeout=600)


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.parametrize(("where", "code"), _blocks("slow"), ids=[w for w, _ in _blocks("slow")])
def test_slow_blocks_run(where: str, code: str, tmp_path: Path) -> None:
    _run(code, tmp_path, timeout=3600)
