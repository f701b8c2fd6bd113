"""Pictures of a profile: the DAG as `conch graph` draws it, each step coloured and labelled by its share of
the time (the critical path in bold), and a waterfall of one request along the DAG (matplotlib PNG)."""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any

from conch.errors import ConchError
from conch.graph import Edge, Graph, Node, dims_text, share_colour
from conch.harness.profile.report import Profile

MATPLOTLIB_HINT = "pip install matplotlib"


class MatplotlibMissing(ConchError):
    """The waterfall PNG was asked for, and matplotlib is not installed."""


def _tensor_text(t: Mapping[str, Any]) -> str:
    dtype = str(t.get("data_type", "?")).removeprefix("TYPE_")
    return f"{dtype} {dims_text([int(d) for d in t.get('dims', [])])}"


def profile_graph(profile: Profile) -> Graph:
    """The ensemble's DAG from its config, each step with its mean time, share and slack."""
    config = profile.config
    nodes: list[Node] = []
    edges: list[Edge] = []
    writer: dict[str, str] = {}
    for t in config.get("input", []):
        nodes.append(Node(f"in:{t['name']}", "tensor", (str(t["name"]), _tensor_text(t))))
        writer[str(t["name"])] = f"in:{t['name']}"
    scheduling = config.get("ensemble_scheduling", {}).get("step", [])
    for step, raw in zip(profile.steps, scheduling, strict=True):
        c, f = step.config, step.figures
        batching = (f"max_batch_size {c.max_batch_size}" + (", dynamic" if c.dynamic_batching else "")
                    if c.max_batch_size else "no batching")
        timing = f"{f.work_ms:.1f} ms · {step.share:.0%} of end to end"
        where = "critical path" if step.critical else f"slack {step.slack_ms:.1f} ms"
        queue = f"queue {f.queue_ms:.1f} ms · {f.requests_per_execution:.1f} req/exec · {where}"
        nodes.append(Node(step.model, "step", (step.model, f"{c.backend}, {c.instances} instance(s), {batching}",
                                               timing, queue), fill=share_colour(step.share), bold=step.critical))
        for key, tensor in raw.get("input_map", {}).items():
            source = writer.get(tensor, f"in:{tensor}")
            edges.append(Edge(source, step.model, tensor if tensor == key else f"{tensor} → {key}"))
        for tensor in raw.get("output_map", {}).values():
            writer[tensor] = step.model
    for t in config.get("output", []):
        name = str(t["name"])
        nodes.append(Node(f"out:{name}", "tensor", (name, _tensor_text(t))))
        edges.append(Edge(writer.get(name, f"in:{name}"), f"out:{name}", name))
    title = (f"ensemble {profile.ensemble}: {profile.e2e_ms:.1f} ms end to end = critical path "
             f"{profile.path.length_ms:.1f} ms + scheduler {profile.overhead_ms:.1f} ms "
             f"({profile.run.requests} requests, concurrency {profile.run.concurrency})")
    return Graph(profile.ensemble, title, tuple(nodes), tuple(edges))


def waterfall_png(profile: Profile) -> bytes:
    """One request laid out from the mean figures: each step starts when the steps it reads from have ended
    (at the earliest), split into queue, compute input, infer and output; the critical path in red."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch
    except ImportError:
        raise MatplotlibMissing(f"the waterfall PNG needs matplotlib: {MATPLOTLIB_HINT}") from None
    steps = sorted(profile.steps, key=lambda s: (s.start_ms, s.index))
    parts = (("queue", "queue_ms", "#bdbdbd"), ("compute input / output", "compute_input_ms", "#9ecae1"),
             ("infer", "compute_infer_ms", "#3182bd"), ("compute output", "compute_output_ms", "#9ecae1"))
    fig, ax = plt.subplots(figsize=(11, 1.6 + 0.45 * (len(steps) + 1)), dpi=120)
    labels = []
    for row, step in enumerate(steps):
        left = step.start_ms
        for _, attr, colour in parts:
            width = float(getattr(step.figures, attr))
            ax.barh(row, width, left=left, color=colour, edgecolor="#cb181d" if step.critical else "none",
                    linewidth=1.5 if step.critical else 0)
            left += width
        if not step.critical and step.slack_ms > 0:
            ax.barh(row, step.slack_ms, left=left, color="none", edgecolor="#969696", hatch="//", linewidth=0.5)
        labels.append(("● " if step.critical else "") + step.model)
    row = len(steps)
    ax.barh(row, profile.path.length_ms, color="#fcbba1")
    ax.barh(row, max(profile.overhead_ms, 0.0), left=profile.path.length_ms, color="#fb6a4a")
    labels.append(f"{profile.ensemble} (end to end)")
    ax.set_yticks(range(len(labels)), labels)
    ax.invert_yaxis()
    ax.set_xlabel("milliseconds from the request's arrival at the ensemble (means over the run)")
    prefix = profile.ensemble.removesuffix(".tar.gz") + "__"  # conch's step names repeat the ensemble's
    chain = " → ".join(name.removeprefix(prefix) for name in profile.chain)
    ax.set_title(f"{profile.ensemble}: critical path {chain}\n{profile.path.length_ms:.1f} ms + scheduler "
                 f"{profile.overhead_ms:.1f} ms = {profile.e2e_ms:.1f} ms end to end", fontsize=10)
    handles = [Patch(color=colour, label=label) for label, _, colour in parts[:3]]
    handles += [Patch(facecolor="none", edgecolor="#cb181d", linewidth=1.5, label="● on the critical path"),
                Patch(facecolor="none", edgecolor="#969696", hatch="//", label="slack"),
                Patch(color="#fcbba1", label="critical path"), Patch(color="#fb6a4a", label="ensemble scheduler")]
    ax.legend(handles=handles, loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=8, frameon=False)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    out = io.BytesIO()
    fig.savefig(out, format="png")
    plt.close(fig)
    return out.getvalue()
