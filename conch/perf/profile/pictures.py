"""Pictures of a profile: the DAG as `conch graph` draws it, each step coloured and labelled by its share of
the time (the critical path in bold), and a waterfall of one request along the DAG (matplotlib PNG)."""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any

from conch.diagram import Edge, Graph, Node, dims_text, share_colour
from conch.errors import MatplotlibMissing
from conch.perf.profile.profile_report import Profile

MATPLOTLIB_HINT = "pip install matplotlib"


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


QUEUE, MOVE, INFER, WAIT = "#bdbdbd", "#9ecae1", "#3182bd", "#f0f0f0"
Segment = tuple[float, float, str]  # left, width, colour
# a traced step's segments: from event, to event, colour
TRACED = (("REQUEST_START", "QUEUE_START", WAIT), ("QUEUE_START", "COMPUTE_START", QUEUE),
          ("COMPUTE_START", "COMPUTE_INPUT_END", MOVE), ("COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", INFER),
          ("COMPUTE_OUTPUT_START", "COMPUTE_END", MOVE), ("COMPUTE_END", "REQUEST_END", WAIT))


def _mean_rows(profile: Profile) -> list[tuple[str, bool, list[Segment]]]:
    """Each step from the means, starting when the steps it reads from have ended (at the earliest)."""
    rows = []
    for step in sorted(profile.steps, key=lambda s: (s.start_ms, s.index)):
        left, segments = step.start_ms, []
        for attr, colour in (("queue_ms", QUEUE), ("compute_input_ms", MOVE), ("compute_infer_ms", INFER),
                             ("compute_output_ms", MOVE)):
            width = float(getattr(step.figures, attr))
            segments.append((left, width, colour))
            left += width
        if not step.critical and step.slack_ms > 0:
            segments.append((left, step.slack_ms, "slack"))
        rows.append((step.model, step.critical, segments))
    return rows


def _traced_rows(profile: Profile) -> list[tuple[str, bool, list[Segment]]]:
    """Each step of the traced request, from Triton's timestamps."""
    assert profile.traced is not None
    critical = set(profile.chain)
    rows = []
    for span in sorted(profile.traced.steps, key=lambda s: s.ms.get("REQUEST_START", 0.0)):
        segments = [(span.ms[a], span.ms[b] - span.ms[a], colour) for a, b, colour in TRACED
                    if a in span.ms and b in span.ms]
        rows.append((span.model, span.model in critical, segments))
    return rows


def waterfall_png(profile: Profile) -> bytes:
    """One request along the DAG: the traced one when the profile has it, else laid out from the mean figures;
    each step split into queue, compute input, infer and output; the critical path in red."""
    from conch.perf.load.plots import pyplot  # matplotlib's pyplot on the Agg backend, as every picture

    try:
        plt = pyplot()
        from matplotlib.patches import Patch
    except ImportError:
        raise MatplotlibMissing(f"the waterfall PNG needs matplotlib: {MATPLOTLIB_HINT}") from None
    traced = profile.traced
    rows = _traced_rows(profile) if traced is not None else _mean_rows(profile)
    fig, ax = plt.subplots(figsize=(11, 1.6 + 0.45 * (len(rows) + 1)), dpi=120)
    labels = []
    for row, (model, critical, segments) in enumerate(rows):
        for left, width, colour in segments:
            if colour == "slack":
                ax.barh(row, width, left=left, color="none", edgecolor="#969696", hatch="//", linewidth=0.5)
            else:
                ax.barh(row, width, left=left, color=colour, edgecolor="#cb181d" if critical else "none",
                        linewidth=1.5 if critical else 0)
        labels.append(("● " if critical else "") + model)
    row = len(rows)
    if traced is not None:
        ax.barh(row, traced.end_to_end_ms, color="#fcbba1")
        labels.append(f"{profile.ensemble} (this request)")
    else:
        ax.barh(row, profile.path.length_ms, color="#fcbba1")
        ax.barh(row, max(profile.overhead_ms, 0.0), left=profile.path.length_ms, color="#fb6a4a")
        labels.append(f"{profile.ensemble} (end to end)")
    ax.set_yticks(range(len(labels)), labels)
    ax.invert_yaxis()
    ax.set_xlabel("milliseconds from the request's arrival at the ensemble " + (
        "(one traced request, the median of a few)" if traced is not None else "(means over the run)"))
    prefix = profile.ensemble.removesuffix(".tar.gz") + "__"  # conch's step names repeat the ensemble's
    chain = " → ".join(name.removeprefix(prefix) for name in profile.chain)
    means = (f"means: {profile.path.length_ms:.1f} ms + scheduler {profile.overhead_ms:.1f} ms = "
             f"{profile.e2e_ms:.1f} ms end to end")
    ax.set_title(f"{profile.ensemble}: critical path {chain}\n" + (
        f"this request {traced.end_to_end_ms:.1f} ms; {means}" if traced is not None else means), fontsize=10)
    handles = [Patch(color=QUEUE, label="queue"), Patch(color=MOVE, label="compute input / output"),
               Patch(color=INFER, label="infer"),
               Patch(facecolor="none", edgecolor="#cb181d", linewidth=1.5, label="● on the critical path")]
    if traced is not None:
        handles += [Patch(color=WAIT, label="request, outside queue and compute"),
                    Patch(color="#fcbba1", label="the ensemble's request")]
    else:
        handles += [Patch(facecolor="none", edgecolor="#969696", hatch="//", label="slack"),
                    Patch(color="#fcbba1", label="critical path"), Patch(color="#fb6a4a", label="ensemble scheduler")]
    ax.legend(handles=handles, loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=8, frameon=False)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    out = io.BytesIO()
    fig.savefig(out, format="png")
    plt.close(fig)
    return out.getvalue()
