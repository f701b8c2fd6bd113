"""Time to pack the text_embeddings example's environment cold and from the cache.

    python benchmarks/pack_env.py [--python 3.10]

Prints a table and writes benchmarks/results/pack_env.json. The cold run uses an empty cache folder
(pip's own wheel cache may still be warm; the first row says which resolution the run saw).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--python", default="3.10", help="target stub Python (24.10: 3.10)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="conch-bench-cache-") as cache:
        os.environ["CONCH_CACHE_DIR"] = cache
        from conch.builder import pack as packing
        from conch.ensembles.environment import PythonEnv

        env = PythonEnv(requirements=("tokenizers>=0.19,<1",))
        rows = []
        start = time.perf_counter()
        cold = packing.pack(env, args.python)
        rows.append(("cold (resolve + download + pack)", time.perf_counter() - start, cold.from_cache))
        start = time.perf_counter()
        warm = packing.pack(env, args.python)
        rows.append(("cached, same process (resolution memoised)", time.perf_counter() - start, warm.from_cache))
        packing._resolve_with_pip.cache_clear()  # as in a new build process: pins come from the cache
        start = time.perf_counter()
        fresh = packing.pack(env, args.python)
        rows.append(("cached, a new build process (pins from the cache)", time.perf_counter() - start,
                     fresh.from_cache))
        start = time.perf_counter()
        refreshed = packing.pack(env, args.python, refresh=True)
        rows.append(("cached, --refresh (asks the index)", time.perf_counter() - start, refreshed.from_cache))
        size = cold.archive.stat().st_size / 1e6
    print(f"environment: {', '.join(cold.pins)} for CPython {args.python}; packed {size:.1f} MB")
    for label, seconds, from_cache in rows:
        print(f"  {label:<46} {seconds:7.2f} s   from cache: {from_cache}")
    out = ROOT / "benchmarks" / "results" / "pack_env.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "python": args.python, "host_python": sys.version.split()[0], "pins": list(cold.pins),
        "archive_mb": round(size, 2),
        "rows": [{"case": label, "seconds": round(s, 3), "from_cache": c} for label, s, c in rows],
    }, indent=1) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
