"""Derived ensemble warmup on the local Triton: MME load time and first-request latency after a load,
without and with the warmup conch derives from the ensemble's first sample; prints a table, writes
benchmarks/results/warmup.json.

    python benchmarks/warmup.py [ensembles/text_embeddings.py ...] [--repeats 3]

Every load is into a fresh server (nothing cached from an earlier load); the first request sends the
ensemble's last sample (a different payload than the warmup's when the ensemble has two samples), then
the same request again ("steady") for comparison.
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
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ["text_embeddings.py", "image_classifier.py", "resnet_pytorch.py", "resnet_tensorrt.py",
            "bert_torchscript.py"]


def one_load(archive: Path, inputs: dict[str, Any]) -> dict[str, float]:
    """Seconds to load the archive into a fresh server, then ms of the first and second request."""
    from conch.replays.local_replay import stage
    from conch.triton.mme import MultiModelClient
    from conch.triton.server import LocalTriton

    with LocalTriton() as server:
        client = MultiModelClient(server.sagemaker_url, server.http_url)
        folder = stage(archive, server)
        start = time.perf_counter()
        client.load(archive.name, folder, 600)
        load_s = time.perf_counter() - start
        times = []
        for _ in range(2):
            start = time.perf_counter()
            client.invoke_binary(archive.name, inputs)
            times.append((time.perf_counter() - start) * 1000)
    return {"load (s)": load_s, "first request (ms)": times[0], "steady request (ms)": times[1]}


def main() -> int:
    from conch.builder.discover import discover
    from conch.builder.repository_build import build_ensemble

    parser = argparse.ArgumentParser()
    parser.add_argument("paths", nargs="*", type=Path, default=[ROOT / "ensembles" / f for f in EXAMPLES])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--count", type=int, default=2,
                        help="warmup runs per step at load (TorchScript optimises on its second run)")
    args = parser.parse_args()

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for ens in discover(args.paths):
            request = ens.samples[-1].inputs
            archives, build_s = {}, {}
            for variant in ("without", "with"):
                ens.warmup_request = None
                if variant == "with":
                    ens.warmup(ens.samples[0].name, count=args.count)
                build_ensemble(ens, Path(tmp) / "prime", "local")  # exports models and packs envs into the cache
                start = time.perf_counter()
                archives[variant] = build_ensemble(ens, Path(tmp) / variant, "local")
                build_s[variant] = time.perf_counter() - start
            ens.warmup_request = None
            measured: dict[str, list[dict[str, float]]] = {"without": [], "with": []}
            for _ in range(args.repeats):  # alternate, so drift hits both alike
                for variant in ("without", "with"):
                    measured[variant].append(one_load(archives[variant], request))
            for variant in ("without", "with"):
                row: dict[str, Any] = {"ensemble": ens.name, "warmup": variant, "build (s)": build_s[variant]}
                for metric in measured[variant][0]:
                    row[metric] = statistics.median(m[metric] for m in measured[variant])
                rows.append({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()})
            print(f"measured {ens.name}", file=sys.stderr, flush=True)
    columns = list(rows[0])
    widths = [max(len(c), *(len(str(r[c])) for r in rows)) for c in columns]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)))
    for r in rows:
        print("  ".join(str(r[c]).ljust(w) for c, w in zip(columns, widths, strict=True)))
    out = ROOT / "benchmarks" / "results" / "warmup.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"python": sys.version.split()[0], "machine": platform.machine(), "repeats": args.repeats,
            "statistic": "median over repeats, each a fresh server"}
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
