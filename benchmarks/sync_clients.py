"""requests against httpx on the two sync paths users wait on that used requests (issue 31, one client per job):
the MME client's invoke (``MultiModelClient.invoke_json``: replay, `conch profile`'s loads, the pytest plugin) and
`conch profile`'s load (``conch.perf.profile.load.run``). One local tritonserver, the tests' two-step
ensemble loaded as SageMaker loads it, the sides alternating in each round (order reversed every other round).

- invoke, before: the code this replaced, ``requests.post`` per call (requests' module function: a new
  connection each call); after: conch's ``MultiModelClient.invoke_json`` (one kept-alive ``httpx.Client``).
  Beside them, for the libraries alone: ``requests.Session.post`` (kept alive) and ``httpx.post`` (a client,
  so an SSL context and a connection, per call: why conch keeps its clients).
- profile load, before: the replaced ``run`` (a ``requests.Session`` per thread); after: conch's ``run`` (an
  ``httpx.Client`` per thread, made by ``sync_client``), at concurrency 1 and 4.
- a client made and closed: ``requests.Session()``, ``httpx.Client()`` (it loads certifi's CA bundle, whatever
  it will call) and conch's ``sync_client`` for an http:// server (no TLS, no bundle).

Per side: wall ms per call and this process's CPU µs per call (every thread of it: the load's workers too;
tritonserver is another process), medians over the rounds, and the load average (the machine is shared).
Prints a table, writes benchmarks/results/sync_clients.json.

    PYTHONPATH=<a conch tree> python benchmarks/sync_clients.py [--rounds 5] [--calls 300]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from _common import finish


def per_call(call: Callable[[], object], calls: int) -> tuple[float, float]:
    """(wall ms, process CPU µs) per call of ``calls`` calls made one after the other."""
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(calls):
        call()
    return (time.perf_counter() - start) * 1000 / calls, (time.process_time() - cpu) * 1e6 / calls


def requests_run(target: Any, bodies: Sequence[Any], requests_total: int, concurrency: int) -> int:
    """The profile load as it was with requests (conch before issue 31's client change): the same threads and
    counting, a ``requests.Session`` each. The number of requests that failed."""
    import requests

    lock, taken, failed = threading.Lock(), [0], [0]

    def worker() -> None:
        with requests.Session() as session:
            while True:
                with lock:
                    if taken[0] >= requests_total:
                        return
                    body = bodies[taken[0] % len(bodies)]
                    taken[0] += 1
                try:
                    ok = session.post(target.url, data=body.content, timeout=120.0,
                                      headers=target.headers_for(body)).status_code == 200
                except requests.RequestException:
                    ok = False
                if not ok:
                    with lock:
                        failed[0] += 1

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return failed[0]


def main() -> int:
    import httpx
    import requests
    from local_mme import build

    from conch.perf.profile.load import Body, Target, run
    from conch.replays.local_replay import stage, target_name
    from conch.sagemaker.runtime import archive_manifest
    from conch.triton.http_client import sync_client
    from conch.triton.mme import MultiModelClient
    from conch.triton.mme_contract import invoke_path, target_headers
    from conch.triton.server import LocalTriton
    from conch.wire import json_request, parse_json_response

    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    samples: dict[str, list[tuple[float, float]]] = {}
    loads: list[tuple[float, float, float]] = [os.getloadavg()]
    with tempfile.TemporaryDirectory() as tmp:
        built = argparse.Namespace(archive=None, ensemble=Path(__file__).resolve().parent.parent / "tests" /
                                   "fixtures" / "cli_ensembles" / "pipelines.py", only="cli_linear")
        archive = build(built, Path(tmp) / "built")
        inputs = archive_manifest(archive).samples[0].input_arrays()
        with LocalTriton() as triton, MultiModelClient(triton.sagemaker_url, triton.http_url) as client:
            name = target_name(archive)
            client.load(name, stage(archive, triton), 300)
            url = f"{triton.sagemaker_url}{invoke_path(name)}"
            session, kept = requests.Session(), httpx.Client(timeout=120.0)

            def with_requests(post: Callable[..., Any]) -> Callable[[], object]:
                def call() -> object:  # MultiModelClient.invoke_json before issue 31, with ``post`` for requests.post
                    body, content_type = json_request(inputs, None)
                    response = post(url, data=body, headers=target_headers(name, content_type), timeout=120.0)
                    assert response.status_code == 200, response.text
                    return parse_json_response(response.content)
                return call

            def with_httpx(post: Callable[..., Any]) -> Callable[[], object]:
                def call() -> object:
                    body, content_type = json_request(inputs, None)
                    response = post(url, content=body, headers=target_headers(name, content_type), timeout=120.0)
                    assert response.status_code == 200, response.text
                    return parse_json_response(response.content)
                return call

            invokes: dict[str, Callable[[], object]] = {
                "invoke, before: requests.post per call": with_requests(requests.post),
                "invoke, after: MultiModelClient.invoke_json (httpx.Client)": lambda: client.invoke_json(name, inputs),
                "invoke: requests.Session.post (kept alive)": with_requests(session.post),
                "invoke: httpx.Client.post (kept alive)": with_httpx(kept.post),
                "invoke: httpx.post per call (a client each)": with_httpx(httpx.post),
            }
            target, bodies = Target.kserve(triton.http_url, name), [Body.of(inputs)]

            def load_side(runner: Callable[..., object], concurrency: int) -> Callable[[], object]:
                return lambda: runner(target, bodies, args.calls, concurrency)

            profile_loads = {f"profile load at {c}, {side}": load_side(runner, c)
                             for c in (1, 4)
                             for side, runner in (("before: requests.Session per thread", requests_run),
                                                  ("after: httpx.Client per thread (run)", run))}
            def made(make: Callable[[], Any]) -> Callable[[], object]:
                return lambda: make().close()

            clients = {  # a client made and closed: what each replay, profile run and readiness wait pays once
                "a client: requests.Session()": made(requests.Session),
                "a client: httpx.Client() (certifi's CA bundle loaded)": made(lambda: httpx.Client(timeout=120.0)),
                "a client: conch's sync_client(http://...)": made(lambda: sync_client(url, timeout=120.0)),
            }
            for call in invokes.values():  # warm each side (connections, first-call imports)
                for _ in range(20):
                    call()
            for index in range(args.rounds):
                for side, call in (invokes.items() if index % 2 == 0 else reversed(invokes.items())):
                    wall, cpu = per_call(call, args.calls)
                    samples.setdefault(side, []).append((wall, cpu))
                    print(f"round {index + 1} {side}: {wall:.3f} ms, {cpu:.0f} us CPU per call", flush=True)
                for side, call in (clients.items() if index % 2 == 0 else reversed(clients.items())):
                    wall, cpu = per_call(call, 10)
                    samples.setdefault(side, []).append((wall, cpu))
                    print(f"round {index + 1} {side}: {wall:.3f} ms, {cpu:.0f} us CPU", flush=True)
                for side, whole in (profile_loads.items() if index % 2 == 0 else reversed(profile_loads.items())):
                    wall, cpu = per_call(whole, 1)
                    samples.setdefault(side, []).append((wall / args.calls, cpu / args.calls))
                    print(f"round {index + 1} {side}: {wall / args.calls:.3f} ms, {cpu / args.calls:.0f} us CPU "
                          "per request", flush=True)
                loads.append(os.getloadavg())
            session.close()
            kept.close()
    medians = {side: (statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs))
               for side, runs in samples.items()}
    pairs = {"invoke, after: MultiModelClient.invoke_json (httpx.Client)": "invoke, before: requests.post per call",
             "invoke: httpx.Client.post (kept alive)": "invoke: requests.Session.post (kept alive)",
             "invoke: httpx.post per call (a client each)": "invoke, before: requests.post per call",
             "a client: httpx.Client() (certifi's CA bundle loaded)": "a client: requests.Session()",
             "a client: conch's sync_client(http://...)": "a client: requests.Session()",
             **{f"profile load at {c}, after: httpx.Client per thread (run)":
                f"profile load at {c}, before: requests.Session per thread" for c in (1, 4)}}
    rows = []
    for side, (wall, cpu) in medians.items():
        base = medians.get(pairs.get(side, ""))
        rows.append([side, round(wall, 3), round(cpu), f"{wall / base[0]:.2f}" if base else "",
                     f"{cpu / base[1]:.2f}" if base else ""])
    print(f"load average (1 min) from {loads[0][0]:.1f} to {loads[-1][0]:.1f}, "
          f"median {statistics.median(la[0] for la in loads):.1f}; {os.cpu_count()} cores")
    return finish("sync_clients", ["side", "wall ms/call", "CPU us/call", "wall vs before", "CPU vs before"], rows,
                  {"rounds": args.rounds, "calls": args.calls, "runs": samples, "load_average": loads})


if __name__ == "__main__":
    sys.exit(main())
