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
from pathlib import Path

from _common import ROOT, alternate, median, table, write_json


def extractor() -> tuple[str, Callable[[Path, Path], object]]:
    """conch's one safe extraction, wherever this checkout keeps it."""
    try:
        from conch.builder.extract import safe_extract  # type: ignore[import-not-found,unused-ignore]

        return "conch.builder.extract.safe_extract", safe_extract
    except ImportError:
        from conch.builder.archive import safe_extract

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
        count = 0

        def fresh() -> Path:
            nonlocal count
            count += 1
            folder = Path(tmp) / f"x{count}"
            folder.mkdir()
            return folder

        def conch_stage() -> float:
            folder = fresh()
            start = time.perf_counter()
            safe_extract(archive, folder)
            elapsed = time.perf_counter() - start
            shutil.rmtree(folder)
            return elapsed

        def tar_xzf() -> float:
            folder = fresh()
            start = time.perf_counter()
            subprocess.run(["tar", "-C", str(folder), "-xzf", str(archive)], check=True)
            elapsed = time.perf_counter() - start
            shutil.rmtree(folder)
            return elapsed

        samples = alternate({"conch": conch_stage, "tar xzf": tar_xzf}, args.rounds)
        size = archive.stat().st_size / 1e6
    ratio = median(samples["conch"]) / median(samples["tar xzf"])
    print(table(["archive MB", "conch (s)", "tar xzf (s)", "conch/tar", "target"],
                [[round(size, 1), median(samples["conch"]), median(samples["tar xzf"]), round(ratio, 2), "<= 1.0"]]))
    path = write_json("staging", {"extractor": where, "archive_mb": size, "rounds": args.rounds,
                                  "samples": samples, "ratio": ratio})
    print(f"wrote {path.relative_to(ROOT)} ({where})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
