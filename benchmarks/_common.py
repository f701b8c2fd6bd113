"""What the speed benchmarks share: alternating A/B rounds, medians, a table, JSON in results/, and
HTTP load from wrk (a C client: Python clients would cost more per request than the steps measured)."""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"


def alternate(cases: Mapping[str, Callable[[], float]], rounds: int) -> dict[str, list[float]]:
    """Run every case once per round, A then B then ..., and the order reversed every other round."""
    names = list(cases)
    samples: dict[str, list[float]] = {n: [] for n in names}
    for index in range(rounds):
        for name in names if index % 2 == 0 else reversed(names):
            samples[name].append(cases[name]())
    return samples


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(c) for c in header]] + [[f"{c:.3g}" if isinstance(c, float) else str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells)


def write_json(name: str, data: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    meta = {"python": sys.version.split()[0], "machine": platform.machine(), "cores": os.cpu_count(),
            "argv": sys.argv[1:], "shared_machine": True}
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps({"meta": meta, **data}, indent=1, default=str) + "\n")
    return path


def finish(name: str, header: Sequence[str], rows: Sequence[Sequence[Any]], data: dict[str, Any]) -> int:
    """End of an A/B benchmark: the whole table, then results/<name>.json; 0 for ``sys.exit``."""
    print()
    print(table(header, rows))
    path = write_json(name, data)
    print(f"wrote {path.relative_to(ROOT)}")
    return 0


def wrk(url: str, body: bytes, content_type: str, connections: int, seconds: int) -> float:
    """Requests per second that wrk reaches with ``connections`` keep-alive connections (one thread);
    non-2xx answers make it fail."""
    return wrk_run(url, body, content_type, connections, seconds)[0]


def wrk_run(url: str, body: bytes, content_type: str, connections: int, seconds: int,
            headers: Mapping[str, str] | None = None) -> tuple[float, int]:
    """(requests/s, requests) of one wrk run (``headers``: sent with every request besides Content-Type)."""
    rate, total, _ = wrk_latency(url, body, content_type, connections, seconds, headers)
    return rate, total


def wrk_latency(url: str, body: bytes, content_type: str, connections: int, seconds: int,
                headers: Mapping[str, str] | None = None) -> tuple[float, int, float]:
    """(requests/s, requests, p50 latency in ms) of one wrk run (its ``--latency`` distribution)."""
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is needed for HTTP load (Debian: apt-get install wrk)")
    with tempfile.TemporaryDirectory(prefix="conch-wrk-") as tmp:
        payload = Path(tmp) / "body"
        payload.write_bytes(body)
        script = Path(tmp) / "post.lua"
        script.write_text(
            'wrk.method = "POST"\n'
            f'wrk.headers["Content-Type"] = "{content_type}"\n'
            + "".join(f'wrk.headers["{k}"] = "{v}"\n' for k, v in (headers or {}).items()) +
            f'local f = io.open("{payload}", "rb"); wrk.body = f:read("*all"); f:close()\n'
            "done = function(summary, latency, requests)\n"
            '  io.write(string.format("non2xx %d\\n", summary.errors.status))\n'
            "end\n"
        )
        result = subprocess.run(
            ["wrk", "-t1", f"-c{connections}", f"-d{max(1, seconds)}s", "--latency", "-s", str(script), url],
            capture_output=True, text=True, check=True,
        )
    errors = re.search(r"non2xx (\d+)", result.stdout)
    if errors is None or int(errors.group(1)) or "Non-2xx" in result.stdout:
        raise RuntimeError(f"wrk saw failed requests:\n{result.stdout}")
    match = re.search(r"Requests/sec:\s+([0-9.]+)", result.stdout)
    total = re.search(r"(\d+) requests in", result.stdout)
    p50 = re.search(r"^\s*50%\s+([0-9.]+)(us|ms|s)\s*$", result.stdout, re.MULTILINE)
    if match is None or total is None or p50 is None:
        raise RuntimeError(result.stdout)
    scale = {"us": 0.001, "ms": 1.0, "s": 1000.0}[p50.group(2)]
    return float(match.group(1)), int(total.group(1)), float(p50.group(1)) * scale


def stub_cpu_seconds(model_dir_fragment: str) -> float:
    """CPU time (user + system) used so far by the Python-backend stub serving the model whose model.py
    path contains ``model_dir_fragment``: unlike requests/s, it does not move with the machine's load."""
    ticks = os.sysconf("SC_CLK_TCK")
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
            if len(cmdline) < 2 or model_dir_fragment.encode() not in cmdline[1]:
                continue
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        return (int(fields[11]) + int(fields[12])) / ticks
    raise RuntimeError(f"no Python-backend stub runs {model_dir_fragment}")


def cpu_and_parent(proc: Path) -> tuple[float, int]:
    fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), int(fields[1])


def tree_cpu_seconds(pid: int) -> float:
    """CPU time (user + system) used so far by a process and every live descendant (the server and
    its Python-backend stubs)."""
    usage: dict[int, tuple[float, int]] = {}
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                usage[int(proc.name)] = cpu_and_parent(proc)
            except OSError:
                continue
    children: dict[int, list[int]] = {}
    for child, (_, parent) in usage.items():
        children.setdefault(parent, []).append(child)
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        total += usage.get(current, (0.0, 0))[0]
        todo.extend(children.get(current, []))
    return total


def kserve_json(inputs: Mapping[str, Any]) -> bytes:
    """A KServe v2 JSON request body for numpy inputs (BYTES as UTF-8 strings)."""
    tensors = []
    for name, array in inputs.items():
        datatype = {"float32": "FP32", "int64": "INT64", "object": "BYTES"}[str(array.dtype)]
        data = [v.decode() if isinstance(v, bytes) else v for v in array.ravel().tolist()]
        tensors.append({"name": name, "shape": list(array.shape), "datatype": datatype, "data": data})
    return json.dumps({"inputs": tensors}).encode()
