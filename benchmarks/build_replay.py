"""Build and replay timings for example ensembles: prints a table, writes benchmarks/results/*.json.

    python benchmarks/build_replay.py [ensembles/text_embeddings.py ...] [--requests 50]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> int:
    from conch.archive.manifest import read_manifest
    from conch.builder.discover import discover
    from conch.builder.repository_build import build_ensemble
    from conch.ensembles.samples import decode_array
    from conch.replays.local_replay import stage
    from conch.triton.mme import MultiModelClient
    from conch.triton.server import LocalTriton

    parser = argparse.ArgumentParser()
    parser.add_argument("paths", nargs="*", type=Path, default=[ROOT / "ensembles" / "text_embeddings.py"])
    parser.add_argument("--requests", type=int, default=50)
    args = parser.parse_args()

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        ensembles = discover(args.paths)
        archives = []
        for ens in ensembles:
            timings = []
            for attempt in range(2):  # first build may export models into the cache
                start = time.perf_counter()
                archive = build_ensemble(ens, Path(tmp) / f"b{attempt}", "local")
                timings.append(time.perf_counter() - start)
            archives.append(archive)
            rows.append({"ensemble": ens.name, "metric": "build (first, s)", "value": round(timings[0], 3)})
            rows.append({"ensemble": ens.name, "metric": "build (again, s)", "value": round(timings[1], 3)})
            size = round(archive.stat().st_size / 1e6, 2)
            rows.append({"ensemble": ens.name, "metric": "archive (MB)", "value": size})
        start = time.perf_counter()
        with LocalTriton() as server:
            rows.append({"ensemble": "-", "metric": "server start (s)", "value": round(time.perf_counter() - start, 3)})
            client = MultiModelClient(server.sagemaker_url, server.http_url)
            for archive in archives:
                folder = stage(archive, server)
                start = time.perf_counter()
                client.load(archive.name, folder, 600)
                name = archive.name.removesuffix(".tar.gz")
                load_s = round(time.perf_counter() - start, 3)
                rows.append({"ensemble": name, "metric": "MME load (s)", "value": load_s})
                sample = read_manifest(folder)["samples"][0]
                inputs = {k: decode_array(v) for k, v in sample["inputs"].items()}
                for endpoint, call in (("kserve", client.invoke_kserve), ("sagemaker-json", client.invoke_json),
                                       ("sagemaker-binary", client.invoke_binary)):
                    call(archive.name, inputs)  # warm
                    latencies = []
                    for _ in range(args.requests):
                        start = time.perf_counter()
                        call(archive.name, inputs)
                        latencies.append((time.perf_counter() - start) * 1000)
                    rows.append({"ensemble": name, "metric": f"{endpoint} p50 (ms)",
                                 "value": round(statistics.median(latencies), 2)})
                    rows.append({"ensemble": name, "metric": f"{endpoint} p95 (ms)",
                                 "value": round(percentile(latencies, 0.95), 2)})
    width = max(len(r["ensemble"]) for r in rows)
    for r in rows:
        print(f"{r['ensemble']:<{width}}  {r['metric']:<24} {r['value']}")
    out = ROOT / "benchmarks" / "results" / "build_replay.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"python": sys.version.split()[0], "machine": platform.machine(), "requests": args.requests}
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
