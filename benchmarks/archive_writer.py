"""Issue 31: conch's archive writer on one folder, for an A/B of two conch trees (PYTHONPATH picks which).

``python benchmarks/archive_writer.py FOLDER OUT.tar.gz`` writes FOLDER as an archive with
``conch.builder.archive.write_tar`` and prints the seconds it took and the archive's size; run it whole
under a process timer, one tree against another, alternating (benchmarks/RESULTS.md, "Issue 31")."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from conch.atomic_write import atomic_output
from conch.builder.archive import write_tar


def main() -> None:
    folder, out = Path(sys.argv[1]), Path(sys.argv[2])
    start = time.perf_counter()
    with atomic_output(out) as fh:
        write_tar({"": folder}, fh)
    print(f"{time.perf_counter() - start:.2f} s, {out.stat().st_size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
