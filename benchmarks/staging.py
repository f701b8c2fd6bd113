"""Staging (unpacking) an archive as conch does before loading it, vs `tar xzf` of the same archive,
A and B alternating, medians over rounds. The archive is text_embeddings' (built if missing).

    python benchmarks/staging.py [--archive dist/text_embeddings.tar.gz] [--rounds 7] [--ab REV]

With ``--ab REV`` it compares this checkout's extraction with the one at git revision REV instead (wall time and
the process's CPU), alternating. Writes benchmarks/results/staging.json (staging_ab.json with ``--ab``).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Callable
from functools import partial
from pathlib import Path

from _common import ROOT, alternate, median, table, write_json


def extractor_at(rev: str) -> Callable[[Path, Path], object]:
    """``safe_extract`` as it is at git revision ``rev`` (loaded from ``git show``; it imports this conch's errors)."""
    source = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:conch/archive/extract.py"], check=True,
                            capture_output=True, text=True).stdout
    module = types.ModuleType(f"extract_at_{rev}")
    exec(compile(source, f"{rev}:conch/archive/extract.py", "exec"), module.__dict__)
    return module.safe_extract


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--archive", type=Path)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--ab", metavar="REV", help="compare with the extraction at this git revision")
    args = parser.parse_args()
    from conch.archive.extract import safe_extract

    where = "conch.archive.extract.safe_extract"
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

        def conch_stage(source: Path, extract: Callable[[Path, Path], object] = safe_extract,
                        clock: Callable[[], float] = time.perf_counter) -> float:
            folder = fresh()
            start = clock()
            extract(source, folder)
            elapsed = clock() - start
            shutil.rmtree(folder)
            return elapsed

        if args.ab:  # this checkout's extraction against the one at REV: wall and CPU, on both archives
            rev, at_rev = args.ab, extractor_at(args.ab)
            cpu = time.process_time
            samples = alternate({
                "wall, this": partial(conch_stage, archive), f"wall, {rev}": partial(conch_stage, archive, at_rev),
                "cpu, this": partial(conch_stage, archive, safe_extract, cpu),
                f"cpu, {rev}": partial(conch_stage, archive, at_rev, cpu),
                "gzip -6 wall, this": partial(conch_stage, gzip6),
                f"gzip -6 wall, {rev}": partial(conch_stage, gzip6, at_rev)}, args.rounds)
            rows = [[what, median(samples[f"{what}, this"]), median(samples[f"{what}, {rev}"]),
                     round(median(samples[f"{what}, this"]) / median(samples[f"{what}, {rev}"]), 2)]
                    for what in ("wall", "cpu", "gzip -6 wall")]
            print(table(["figure", "this (s)", f"{rev} (s)", "this/rev"], rows))
            path = write_json("staging_ab", {"rev": rev, "rounds": args.rounds, "samples": samples})
            print(f"wrote {path.relative_to(ROOT)}")
            return 0

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
