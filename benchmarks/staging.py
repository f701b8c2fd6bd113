"""Staging (unpacking) an archive as conch does before loading it, vs `tar xzf` of the same archive,
A and B alternating, medians over rounds. The archive is text_embeddings' (built if missing).

    python benchmarks/staging.py [--archive dist/text_embeddings.tar.gz] [--rounds 7]

Writes benchmarks/results/staging.json.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from _common import ROOT, alternate, median, table, write_json


def extractor() -> tuple[str, Callable[[Path, Path], object]]:
    """conch's one safe extraction, wherever this checkout keeps it."""
    try:
        from conch.archive.extract import safe_extract  # type: ignore[import-not-found,unused-ignore]

        return "conch.archive.extract.safe_extract", safe_extract
    except ImportError:
        from conch.archive.extract import safe_extract

        return "conch.builder.archive.safe_extract", safe_extract


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--archive", type=Path)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    where, safe_extract = extractor()
    with tempfile.TemporaryDirectory(prefix="conch-bench-stage-") as tmp:
        archive = args.archive
        if archive is None:
            subprocess.run([sys.executable, "-m", "conch.cli", "build", str(ROOT / "ensembles" / "text_embeddings.py"),
                            "--out", tmp, "--target", "local"], check=True, capture_output=True)
            archive = Path(tmp) / "text_embeddings.tar.gz"
        # the same tree as `tar czf` (gzip -6 throughout) writes it, to tell the extractor from the format
        tree = Path(tmp) / "tree"
        tree.mkdir()
        subprocess.run(["tar", "-C", str(tree), "-xzf", str(archive)], check=True)
        gzip6 = Path(tmp) / "gzip6.tar.gz"
        subprocess.run(["tar", "-C", str(tree), "-czf", str(gzip6), "."], check=True)
        count = 0

        def fresh() -> Path:
            nonlocal count
            count += 1
            folder = Path(tmp) / f"x{count}"
            folder.mkdir()
            return folder

        def conch_stage(source: Path) -> float:
            folder = fresh()
            start = time.perf_counter()
            safe_extract(source, folder)
            elapsed = time.perf_counter() - start
            shutil.rmtree(folder)
            return elapsed

        def tar_xzf(source: Path) -> float:
            folder = fresh()
            start = time.perf_counter()
            subprocess.run(["tar", "-C", str(folder), "-xzf", str(source)], check=True)
            elapsed = time.perf_counter() - start
            shutil.rmtree(folder)
            return elapsed

        samples = alternate({"conch": partial(conch_stage, archive), "tar xzf": partial(tar_xzf, archive),
                             "conch, gzip -6 archive": partial(conch_stage, gzip6),
                             "tar xzf, gzip -6 archive": partial(tar_xzf, gzip6)}, args.rounds)
        sizes = [archive.stat().st_size / 1e6, gzip6.stat().st_size / 1e6]
    rows = []
    for (label, size), suffix in zip((("conch build's archive", sizes[0]), ("tar czf of its tree", sizes[1])),
                                     ("", ", gzip -6 archive"), strict=True):
        a, b = median(samples["conch" + suffix]), median(samples["tar xzf" + suffix])
        rows.append([label, round(size, 1), a, b, round(a / b, 2), "<= 1.0"])
    print(table(["archive", "MB", "conch (s)", "tar xzf (s)", "conch/tar", "target"], rows))
    path = write_json("staging", {"extractor": where, "archive_mb": sizes, "rounds": args.rounds,
                                  "samples": samples, "ratio": rows[0][4], "ratio_gzip6": rows[1][4]})
    print(f"wrote {path.relative_to(ROOT)} ({where})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
