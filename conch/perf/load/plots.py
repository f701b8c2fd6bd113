"""Seed 003's figures for one run: latency and throughput against users on top, successful and failed
requests per stage below. matplotlib with the Agg backend (no screen needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

KINDS = {"sagemaker": "the SageMaker runtime API", "boto3": "boto3 sagemaker-runtime", "kserve": "KServe v2"}


def pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_png(fig: Any, path: Path) -> Path:
    """Write ``fig`` to ``path`` as a PNG, atomically (a half-written picture never stands under its name), and
    free it: every picture conch draws ends here."""
    from conch.atomic_write import atomic_output

    try:
        with atomic_output(path) as fh:
            fig.savefig(fh, dpi=110, format="png")
    finally:
        pyplot().close(fig)
    return path


def plot_run(summary: dict[str, Any], path: Path, title: str = "") -> Path:
    plt = pyplot()
    stages = summary["per_stage"]
    users = [s["users"] for s in stages]
    labels = [f"{s['stage']}\n{s['users']}u" for s in stages]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 7), constrained_layout=True)
    for key, style, color in (("p50_ms", "o-", "tab:blue"), ("p90_ms", "s--", "tab:orange"),
                              ("p99_ms", "^:", "tab:purple")):
        points = [(u, s[key]) for u, s in zip(users, stages, strict=True) if s[key] is not None]
        if points:
            top.plot(*zip(*points, strict=True), style, color=color, label=f"latency {key[:3]}")
    top.set_xlabel("concurrent users")
    top.set_ylabel("latency (ms)")
    rate = top.twinx()
    rate.plot(users, [s["throughput_rps"] for s in stages], "D-", color="tab:green", label="throughput")
    rate.set_ylabel("successful requests/s")
    lines = top.get_legend_handles_labels()[0] + rate.get_legend_handles_labels()[0]
    top.legend(lines, [ln.get_label() for ln in lines], loc="upper right", fontsize=8)
    first = summary.get("first_failure")
    if first:
        top.axvline(first["users"], color="tab:red", alpha=0.5)
        top.text(first["users"], top.get_ylim()[1] * 0.6, " first failure", color="tab:red", fontsize=8, va="top")
    positions = range(len(stages))
    bottom.bar(positions, [s["successes"] for s in stages], label="successful", color="tab:blue")
    bottom.bar(positions, [s["failures"] for s in stages], bottom=[s["successes"] for s in stages],
               label="failed", color="tab:red")
    bottom.set_xticks(list(positions), labels, fontsize=8)
    bottom.set_xlabel("stage (users)")
    bottom.set_ylabel("requests")
    bottom.legend(fontsize=8)
    via = KINDS.get(summary["target"]["kind"], summary["target"]["kind"])
    fig.suptitle(title or f"load test via {via}, {len(summary['targets'])} TargetModels")
    return save_png(fig, path)
