"""The floor of a uvicorn front on this machine. Under wrk at 32 connections, alternating, the CPU per call of:
(a) Triton straight (tritonserver and its Python stubs, and wrk); (b) a bare uvicorn (uvloop + httptools, logs
off, as conch's front) answering a fixed 16-byte body with no hop, also "paced" (each answer held for the time
Triton takes per call at that many connections, so each loop turn serves as few calls as in front of Triton),
and the same on uvicorn's pure-Python parser (``http="h11"``: what httptools buys); (c) the same trivial app plus
the hop to Triton (conch's ``TritonHop``: the least a uvicorn front in front of Triton does); (d) conch's local MME
front. Whether "the front's added time at 32 connections <= 20 % of Triton's" is
reachable while keeping uvicorn follows from (c) against (a). Prints a table, writes
benchmarks/results/front_floor.json.

    python benchmarks/front_floor.py [--rounds 4] [--seconds 3] [--connections 32]

(b) and (c) run in processes of their own; (d) is the local MME's front thread in this process (its CPU read
from /proc for that thread alone). Per call: CPU of the side's server, of tritonserver's process tree, of wrk,
and of the whole machine (every core's busy time, so the others' load shows up there too).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from _common import cpu_and_parent, finish, tree_cpu_seconds, wrk_run

ANSWER = b"0123456789abcdef"  # (b)'s fixed 16-byte answer
SIDES = ("straight", "trivial", "trivial, paced", "trivial, h11", "trivial+hop", "front")
HELPERS = ("trivial", "trivial, h11", "trivial+hop")  # the sides served by a process of their own


def serve(kind: str, triton_url: str, target: str) -> None:
    """(b) or (c): a plain ASGI app on uvicorn as conch's front runs it; prints the port, serves until killed."""
    import uvicorn

    from conch.endpoint.app import read_body as read
    from conch.endpoint.hop import TritonHop

    hop: list[TritonHop] = []

    async def trivial(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await read(receive)
        query: bytes = scope["query_string"]
        if query:  # ?pace=<seconds>: answer as late as Triton would, so each loop turn serves as few calls
            await asyncio.sleep(float(query[5:]))
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"application/json"), (b"content-length", b"16")]})
        await send({"type": "http.response.body", "body": ANSWER})

    async def with_hop(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = await read(receive)
        if not hop:
            hop.append(TritonHop(triton_url))
        answer = await hop[0].invoke(target, body, "application/json")
        await send({"type": "http.response.start", "status": answer.status, "headers": [
            (b"content-type", answer.content_type.encode("latin-1")),
            (b"content-length", str(len(answer.content)).encode("latin-1"))]})
        await send({"type": "http.response.body", "body": answer.content})

    config = uvicorn.Config(with_hop if kind.endswith("hop") else trivial, host="127.0.0.1", port=0, loop="uvloop",
                            http="h11" if kind.endswith("h11") else "httptools", lifespan="off",
                            log_level="warning", access_log=False, timeout_keep_alive=30, proxy_headers=False,
                            server_header=False, log_config=None)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    print(server.servers[0].sockets[0].getsockname()[1], flush=True)
    thread.join()


def thread_cpu(native_id: int) -> float:
    """User + system seconds of one thread of this process (``/proc/self/task/<tid>/stat``)."""
    return cpu_and_parent(Path(f"/proc/self/task/{native_id}"))[0]


def machine_busy() -> float:
    import psutil

    t = psutil.cpu_times()
    return float(t.user + t.nice + t.system + t.irq + t.softirq + getattr(t, "steal", 0.0))


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # wrk's, once it has exited and been waited for
    return usage.ru_utime + usage.ru_stime


def main() -> int:
    import psutil
    from local_mme import build

    from conch.endpoint import LocalMME
    from conch.sagemaker.runtime import archive_manifest
    from conch.triton.mme_contract import model_hash
    from conch.wire import TARGET_HEADER, json_request

    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seconds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--serve", choices=HELPERS, help=argparse.SUPPRESS)
    parser.add_argument("--triton", default="", help=argparse.SUPPRESS)
    parser.add_argument("--target", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.triton, args.target)
        return 0
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is needed (Debian: apt-get install wrk)")

    samples: dict[str, list[dict[str, float]]] = {side: [] for side in SIDES}
    with tempfile.TemporaryDirectory() as tmp:
        built = argparse.Namespace(archive=None, ensemble=Path(__file__).resolve().parent.parent / "tests" /
                                   "fixtures" / "cli_ensembles" / "pipelines.py", only="cli_linear")
        archive = build(built, Path(tmp) / "built")
        body, content_type = json_request(archive_manifest(archive).samples[0].input_arrays())
        source = Path(tmp) / "source"
        source.mkdir()
        target = "copy-000.tar.gz"
        shutil.copyfile(archive, source / target)
        with LocalMME(source) as mme:
            mme.load(target)
            assert mme.triton.process is not None and mme._thread is not None and mme._thread.native_id
            triton = psutil.Process(mme.triton.process.pid)
            front_tid = mme._thread.native_id
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).parent),
                                                                            os.environ.get("PYTHONPATH")]))}
            helpers = {kind: subprocess.Popen([sys.executable, __file__, "--serve", kind, "--triton",
                                               mme.triton.sagemaker_url, "--target", target],
                                              stdout=subprocess.PIPE, env=env, text=True)
                       for kind in HELPERS}
            try:
                ports = {kind: int(p.stdout.readline()) for kind, p in helpers.items()}  # type: ignore[union-attr]
                urls = {"straight": f"{mme.triton.sagemaker_url}/models/{model_hash(target)}/invoke",
                        "trivial": f"http://127.0.0.1:{ports['trivial']}/endpoints/local/invocations",
                        "trivial, paced": "",
                        **{kind: f"http://127.0.0.1:{ports[kind]}/endpoints/local/invocations"
                           for kind in HELPERS[1:]},
                        "front": f"{mme.url}/endpoints/local/invocations"}
                servers: dict[str, Any] = {kind: psutil.Process(p.pid) for kind, p in helpers.items()}
                for side in SIDES:  # warm every path (connections, the hop's pool, Triton's instances)
                    rate, _ = wrk_run(urls[side], body, content_type, args.connections, 1, {TARGET_HEADER: target})
                    if side == "straight":  # the paced side answers each call after Triton's time at this rate
                        urls["trivial, paced"] = f"{urls['trivial']}?pace={args.connections / rate:.6f}"
                for index in range(args.rounds):
                    order = SIDES if index % 2 == 0 else tuple(reversed(SIDES))
                    for side in order:
                        def server_cpu(side: str = side) -> float:
                            if side == "front":
                                return thread_cpu(front_tid)
                            if side == "straight":
                                return 0.0
                            return float(sum(servers[side.removesuffix(", paced")].cpu_times()[:2]))

                        load = os.getloadavg()[0]
                        before = (server_cpu(), tree_cpu_seconds(triton.pid), children_cpu(), machine_busy())
                        rate, count = wrk_run(urls[side], body, content_type, args.connections, args.seconds,
                                              {TARGET_HEADER: target})
                        after = (server_cpu(), tree_cpu_seconds(triton.pid), children_cpu(), machine_busy())
                        per_call = [(a - b) / count * 1e6 for a, b in zip(after, before, strict=True)]
                        figures = {"req/s": rate, "server us/call": per_call[0], "triton us/call": per_call[1],
                                   "wrk us/call": per_call[2], "machine us/call": per_call[3], "load": load}
                        samples[side].append(figures)
                        print(f"round {index + 1} {side:<12} " + ", ".join(f"{k} {v:.1f}" for k, v in
                                                                             figures.items()), flush=True)
            finally:
                for p in helpers.values():
                    p.kill()
                    p.wait()
    medians = {side: {k: statistics.median(s[k] for s in runs) for k in runs[0]} for side, runs in samples.items()}
    straight = medians["straight"]["req/s"]
    rows = []
    for side in SIDES:
        m = medians[side]
        added = f"{(straight / m['req/s'] - 1) * 100:+.0f} %" if "hop" in side or side == "front" else "-"
        rows.append([side, round(m["req/s"]), added, round(m["server us/call"]), round(m["triton us/call"]),
                     round(m["wrk us/call"]), round(m["machine us/call"]), round(m["load"], 2)])
    header = ["side", "req/s", "added vs straight", "server us/call", "triton tree us/call", "wrk us/call",
              "machine us/call", "load before"]
    return finish("front_floor", header, rows, {"rounds": args.rounds, "seconds": args.seconds,
                                                "connections": args.connections, "runs": samples,
                                                "medians": medians})


if __name__ == "__main__":
    sys.exit(main())
