"""The plan as a table and a figure: hit rate against instances per type, monthly cost MME vs one endpoint
per ensemble."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from conch.perf.load.plots import pyplot, save_png
from conch.plan.capacity import Row


def table(rows: Sequence[Row]) -> str:
    header = ("instance type", "$/h", "models/inst", "instances", "hit rate", "wait/req ms", "wait/miss s",
              "p99 ms", "MME $/month", "1 endpoint/ensemble $/month", "limited by")
    body = [(r.instance_type, f"{r.price_per_hour:.3f}", r.models_per_instance, _v(r.instances),
             _v(r.hit_rate, "{:.2%}"), _v(r.mean_wait_ms, "{:.1f}"), _v(r.wait_per_miss_s, "{:.2f}"),
             _v(r.p99_ms, "{:.0f}"), _v(r.monthly, "{:,.0f}"), _v(r.single_endpoints_monthly, "{:,.0f}"),
             r.limited_by) for r in rows]
    widths = [max(len(str(x[i])) for x in [header, *body]) for i in range(len(header))]
    lines = ["  ".join(str(v).ljust(w) if i in (0, 10) else str(v).rjust(w)
                       for i, (v, w) in enumerate(zip(row, widths, strict=True))) for row in [header, *body]]
    best = min((r for r in rows if r.monthly is not None), key=lambda r: r.monthly or 0, default=None)
    if best is not None:
        lines.append(f"cheapest: {best.instances} x {best.instance_type} at ${best.monthly:,.0f}/month "
                     f"(one endpoint per ensemble on it: ${best.single_endpoints_monthly:,.0f}/month)")
    return "\n".join(lines)


def _v(value: float | int | None, fmt: str = "{}") -> str:
    return "-" if value is None else fmt.format(value)


def plot_plan(rows: Sequence[Row], path: Path, title: str = "") -> Path:
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5.5), constrained_layout=True)
    shown = [r for r in rows if r.curve]
    for r in shown:
        xs, ys = zip(*r.curve, strict=True)
        left.plot(xs, ys, ".-", label=r.instance_type)
    left.set_xscale("log")
    left.set_xlabel("instances")
    left.set_ylabel("simulated cache hit rate")
    left.legend(fontsize=7, ncol=2)
    priced = [r for r in rows if r.monthly is not None]
    positions = range(len(priced))
    right.barh([p - 0.2 for p in positions], [r.monthly or 0 for r in priced], height=0.4, label="one MME")
    right.barh([p + 0.2 for p in positions], [r.single_endpoints_monthly or 0 for r in priced], height=0.4,
               label="one endpoint per ensemble")
    right.set_yticks(list(positions), [f"{r.instance_type} x{r.instances}" for r in priced], fontsize=7)
    right.set_xscale("log")
    right.set_xlabel("USD per month")
    right.legend(fontsize=8)
    fig.suptitle(title or "capacity plan")
    return save_png(fig, path)


def churn_line(rows: Sequence[Row], rps: float, release: str) -> str:
    """The cheapest plan's churn (loads per hour: its misses; each evicts a model) and what Triton's lookup race
    of ``release`` means for it (``conch.sagemaker.images.churn_note``)."""
    from conch.sagemaker.images import churn_note

    best = min((r for r in rows if r.monthly is not None and r.hit_rate is not None), key=lambda r: r.monthly or 0,
               default=None)
    if best is None or best.hit_rate is None:
        return f"churn: no plan meets the targets; {churn_note(release)}"
    loads = rps * (1 - best.hit_rate) * 3600
    fleet = f"{best.instances} x {best.instance_type}"
    if loads < 1:
        return f"churn: under 1 load per hour on {fleet}: Triton's load/unload races hardly apply"
    return f"churn: about {loads:,.0f} loads and unloads per hour on {fleet}; {churn_note(release)}"
