"""`conch plan`: a capacity plan for a fleet of ensembles behind SageMaker MMEs: instances needed per instance
type, hit rate and monthly cost, from a probe's figures (or ones measured here) and the traffic."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from conch.cli.console import document, say
from conch.cli.console import result as shown
from conch.cli.discovery import bench_archives
from conch.cli.flags import Subcommands, size
from conch.ensembles.target import DEFAULT_RELEASE
from conch.errors import BenchError

if TYPE_CHECKING:
    from conch.plan.capacity import Row
    from conch.plan.components import ComponentRow


def cmd_plan(args: argparse.Namespace) -> int:
    from conch.plan.capacity import Profile, Targets, Traffic, plan, to_json
    from conch.plan.instance_data import load_instances
    from conch.plan.plan_report import churn_line, plot_plan, table

    profiles = [Profile.read(p) for p in args.probe or []]
    for archive in bench_archives(args.measure or []):  # measured on the spot: a short probe of a few copies
        import psutil

        from conch.ensembles.payloads import read_payload_file
        from conch.perf.probe import probe

        say(f"measuring {archive.name}: {args.measure_copies} copies through the local MME")
        # copies with step names of their own: what `conch deploy --copies` uploads
        profiles.append(Profile.from_probe(probe(archive, psutil.virtual_memory().total,
                                                 max_copies=args.measure_copies, step_names="isolate",
                                                 payloads=read_payload_file(args.payload) if args.payload else None
                                                 ).to_json()))
    if args.memory_per_model is not None:
        profiles.append(Profile("given", args.memory_per_model, args.load_seconds, args.gpu_memory_per_model,
                                args.base_memory or 0))
    if not profiles:
        raise BenchError("give each ensemble's cost: --probe PROBE.json (from `conch bench --probe`), --measure "
                         "ARCHIVE (probed here), or --memory-per-model SIZE with --load-seconds S")
    if args.bench:
        traffic = Traffic.from_bench(args.bench, args.rps, args.zipf)
    else:
        traffic = Traffic(args.rps, args.zipf, args.service_ms, None, args.instance_rps)
    data = load_instances(args.instances)
    gpu = True if args.gpu_only else (False if args.cpu_only else None)
    types = data.pick(args.instance_type, gpu=gpu)
    targets = Targets(args.miss_rate, args.p99_ms, args.utilisation)
    rows = plan(profiles, args.ensembles, traffic, targets, types, threshold=args.threshold)
    from conch.plan.components import assumptions, components_table, plan_components

    component_rows = [plan_components(profiles, args.ensembles, traffic, targets, t, threshold=args.threshold,
                                      cpus_per_copy=args.cpus_per_copy) for t in types]
    from conch.perf.load.run_summary import write_json

    context = {"ensembles": args.ensembles, "profiles": [vars(p) for p in profiles], "traffic": vars(traffic),
               "targets": vars(targets), "threshold": args.threshold,
               "instance_data": {"date": data.date, "region": data.region, "source": data.source}}
    planned = to_json(rows, **context)
    planned["components"] = [vars(r) for r in component_rows]
    planned["components_assumptions"] = assumptions(args.cpus_per_copy)
    write_json(planned, args.out / "plan.json")
    plot_plan(rows, args.out / "plan.png", f"{args.ensembles} ensembles, {args.rps:g} req/s, Zipf {args.zipf:g}")
    shown(table(rows))
    shown("\nthe same fleet as inference components (one component per ensemble):\n"
          + components_table(component_rows, {r.instance_type: r.monthly for r in rows}))
    shown(_verdict(rows, component_rows))
    for line in assumptions(args.cpus_per_copy):
        say(f"assumption: {line}")
    say(churn_line(rows, args.rps, args.release))
    say(f"prices: {data.region}, {data.date} (conch's instance data; --instances FILE for your own)")
    say(f"wrote {args.out / 'plan.json'} and {args.out / 'plan.png'}")
    document({**planned, "json_path": str(args.out / "plan.json"), "png_path": str(args.out / "plan.png")})
    return 0


def _verdict(rows: Sequence[Row], component_rows: Sequence[ComponentRow]) -> str:
    """One line: the cheapest MME plan against the cheapest inference-component plan."""
    mme = min((r for r in rows if r.monthly is not None), key=lambda r: r.monthly or 0.0, default=None)
    ic = min((r for r in component_rows if r.monthly is not None), key=lambda r: r.monthly or 0.0, default=None)
    left = (f"MME {mme.instances} x {mme.instance_type} ${mme.monthly:,.0f}/month, hit rate {mme.hit_rate:.2%}, "
            f"{mme.wait_per_miss_s:.1f} s per miss" if mme is not None else "MME: no plan meets the targets")
    right = (f"inference components {ic.instances} x {ic.instance_type} ${ic.monthly:,.0f}/month, {ic.copies} "
             "copies, no cold start" if ic is not None else "inference components: no instance type fits a copy")
    return f"cheapest: {left} | {right}"


def register(sub: Subcommands) -> None:
    p = sub.add_parser("plan", help="simulate MMEs over instance types: instances needed, hit rate, cost")
    p.add_argument("--ensembles", type=int, required=True, help="how many ensembles the fleet serves")
    p.add_argument("--rps", type=float, required=True, help="requests per second over all ensembles")
    p.add_argument("--zipf", type=float, default=1.0, help="popularity skew over ensembles (0: uniform)")
    cost = p.add_argument_group("what one ensemble costs an instance")
    cost.add_argument("--probe", type=Path, action="append",
                      help="a probe JSON from `conch bench --probe` (repeatable: ensembles cycle through them)")
    cost.add_argument("--measure", type=Path, action="append", metavar="ARCHIVE",
                      help="measure archives (or folders of them) here with a short probe instead")
    cost.add_argument("--payload", type=Path, help="with --measure: the request that loads each copy (a KServe v2 "
                      "JSON request, or conch import's samples file), for archives made by hand")
    cost.add_argument("--measure-copies", type=int, default=3, help="copies the short probe loads (default 3)")
    cost.add_argument("--memory-per-model", type=size, help="instead of a probe: host memory per ensemble")
    cost.add_argument("--gpu-memory-per-model", type=size,
                      help="GPU memory per ensemble (default: taken equal to its host memory)")
    cost.add_argument("--base-memory", type=size, help="memory of the serving container with no model")
    cost.add_argument("--load-seconds", type=float, default=2.0, help="with --memory-per-model: load time")
    serve = p.add_argument_group("service time and throughput")
    serve.add_argument("--bench", type=Path, help="a bench JSON from `conch bench`: warm latency, and the throughput "
                                                  "one instance sustained before its first failure")
    serve.add_argument("--service-ms", type=float, default=50.0, help="without --bench: warm latency p50")
    serve.add_argument("--instance-rps", type=float, help="without --bench: requests/s one instance sustains")
    goal = p.add_argument_group("targets")
    goal.add_argument("--miss-rate", type=float, default=0.01,
                      help="largest share of requests that may wait for a model load (default 0.01)")
    goal.add_argument("--p99-ms", type=float, help="largest p99 latency")
    goal.add_argument("--utilisation", type=float, default=0.7, help="of one instance's throughput (default 0.7)")
    goal.add_argument("--threshold", type=float, default=0.9, help="share of memory models may fill (default 0.9)")
    kinds = p.add_argument_group("instance types")
    kinds.add_argument("--instance-type", action="append", help="only this type (repeatable)")
    kinds.add_argument("--gpu-only", action="store_true")
    kinds.add_argument("--cpu-only", action="store_true")
    kinds.add_argument("--instances", type=Path, help="your own instance data file (format of conch's)")
    p.add_argument("--release", default=DEFAULT_RELEASE, help=f"Triton release YY.MM of the SageMaker image (default "
                   f"{DEFAULT_RELEASE}): which of Triton's load/unload races apply")
    p.add_argument("--cpus-per-copy", type=float, default=1.0,
                   help="CPU cores one inference-component copy reserves (default 1)")
    p.add_argument("--out", type=Path, default=Path("plan-results"), help="folder for plan.json and plan.png")
    p.set_defaults(func=cmd_plan)
