"""One request traced through the ensemble: Triton's trace extension (level TIMESTAMPS) switched on for a few
requests after the measured run, on a server conch starts with a trace file (`--trace-config`). Each step's
REQUEST_START, QUEUE_START, COMPUTE_START, COMPUTE_INPUT_END, COMPUTE_OUTPUT_START, COMPUTE_END and
REQUEST_END, relative to the ensemble's REQUEST_START: the waterfall of a real request, not of means."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conch.perf.profile.load import Body, Target, run
from conch.triton.http_client import sync_client

TRACED_REQUESTS = 5  # the median of these (by end to end) is drawn
EVENTS = ("REQUEST_START", "QUEUE_START", "COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START",
          "COMPUTE_END", "REQUEST_END")
WRITE_WAIT_S = 10.0


def trace_args(trace_file: Path) -> tuple[str, ...]:
    """Start-up flags: tracing off, every request traced once switched on, one file per trace."""
    return (f"--trace-config=triton,file={trace_file}", "--trace-config=level=OFF", "--trace-config=rate=1",
            "--trace-config=triton,log-frequency=1")


@dataclass(frozen=True)
class Span:
    model: str
    ms: Mapping[str, float]  # event -> milliseconds from the ensemble's REQUEST_START

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model, "ms": {k: round(v, 3) for k, v in self.ms.items()}}


@dataclass(frozen=True)
class TracedRequest:
    ensemble: str
    end_to_end_ms: float
    steps: tuple[Span, ...]

    def to_json(self) -> dict[str, Any]:
        return {"ensemble": self.ensemble, "end_to_end_ms": round(self.end_to_end_ms, 3),
                "steps": [s.to_json() for s in self.steps]}


def parse_traces(entries: Sequence[Mapping[str, Any]], ensemble: str) -> list[TracedRequest]:
    """Triton's trace file entries (one JSON list) as traced requests of ``ensemble``."""
    models: dict[int, str] = {}
    parents: dict[int, int] = {}
    stamps: dict[int, dict[str, int]] = {}
    for e in entries:
        trace = int(e["id"])
        if "model_name" in e:
            models[trace] = str(e["model_name"])
            if e.get("parent_id") is not None:
                parents[trace] = int(e["parent_id"])
        for t in e.get("timestamps", []):
            stamps.setdefault(trace, {}).setdefault(str(t["name"]), int(t["ns"]))
    found = []
    for trace, model in models.items():
        root = stamps.get(trace, {})
        if model != ensemble or trace in parents or not {"REQUEST_START", "REQUEST_END"} <= set(root):
            continue
        zero = root["REQUEST_START"]
        steps = tuple(Span(models[child], {k: (v - zero) / 1e6 for k, v in stamps.get(child, {}).items()
                                           if k in EVENTS})
                      for child in sorted(c for c, p in parents.items() if p == trace))
        found.append(TracedRequest(ensemble, (root["REQUEST_END"] - zero) / 1e6, steps))
    return found


def trace_requests(http_url: str, trace_file: Path, target: Target, ensemble: str,
                   bodies: Sequence[Body]) -> TracedRequest | None:
    """Switch tracing on, send a few requests one at a time, switch it off; the median one (None when the
    server wrote no trace)."""
    setting = f"{http_url.rstrip('/')}/v2/trace/setting"
    for old in trace_file.parent.glob(f"{trace_file.name}.*"):
        old.unlink()
    with sync_client(setting, timeout=30) as http:
        http.post(setting, json={"trace_level": ["TIMESTAMPS"]}).raise_for_status()
        try:
            run(target, bodies, TRACED_REQUESTS, 1)
        finally:
            http.post(setting, json={"trace_level": ["OFF"]})
    deadline = time.monotonic() + WRITE_WAIT_S
    traced: list[TracedRequest] = []
    while time.monotonic() < deadline:
        traced = []
        for path in sorted(trace_file.parent.glob(f"{trace_file.name}.*")):
            try:
                traced += parse_traces(json.loads(path.read_text()), ensemble)
            except ValueError:  # still being written
                continue
        if len(traced) >= TRACED_REQUESTS:
            break
        time.sleep(0.2)
    if not traced:
        return None
    return sorted(traced, key=lambda t: t.end_to_end_ms)[len(traced) // 2]
