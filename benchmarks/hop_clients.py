"""The invocation hop's own cost: calls straight from an event loop to a loaded model on the local tritonserver's
SageMaker port, through conch's ``TritonHop.invoke`` (whichever conch is on PYTHONPATH), a plain httpx
``AsyncClient.post``, and aiohttp's client when it is installed, alternating, at 1 and 8 calls in flight. Per side:
calls/s and the loop thread's CPU per call (the front runs the hop on its one event loop thread, so this CPU is
what the front spends per call on the hop). Prints a table, writes benchmarks/results/hop_clients.json.

    PYTHONPATH=<a conch tree> python benchmarks/hop_clients.py [--rounds 3] [--calls 200]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from _common import finish


async def rate_and_cpu(call: Callable[[], Awaitable[object]], in_flight: int, calls: int) -> tuple[float, float]:
    """(calls/s, this thread's CPU seconds per call) of ``calls`` calls, ``in_flight`` at a time."""
    for _ in range(5):
        await call()

    async def caller() -> None:
        for _ in range(calls // in_flight):
            await call()

    start, cpu = time.perf_counter(), time.thread_time()
    await asyncio.gather(*(caller() for _ in range(in_flight)))
    done = calls // in_flight * in_flight
    return done / (time.perf_counter() - start), (time.thread_time() - cpu) / done


def main() -> int:
    import httpx
    import uvloop
    from local_mme import build

    from conch.endpoint import LocalMME
    from conch.endpoint.hop import TritonHop
    from conch.sagemaker.runtime import archive_manifest
    from conch.triton.mme_contract import model_hash
    from conch.wire import TARGET_HEADER, json_request

    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    samples: dict[str, list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        built = argparse.Namespace(archive=None, ensemble=Path(__file__).resolve().parent.parent / "tests" /
                                   "fixtures" / "cli_ensembles" / "pipelines.py", only="cli_linear")
        archive = build(built, Path(tmp) / "built")
        body, content_type = json_request(archive_manifest(archive).samples[0].input_arrays())
        source = Path(tmp) / "source"
        source.mkdir()
        target = "m.tar.gz"
        shutil.copyfile(archive, source / target)
        with LocalMME(source) as mme:
            mme.load(target)
            url = f"{mme.triton.sagemaker_url}/models/{model_hash(target)}/invoke"
            headers = {TARGET_HEADER: target, "Content-Type": content_type}

            async def run() -> None:
                hop = TritonHop(mme.triton.sagemaker_url)
                client = httpx.AsyncClient(limits=httpx.Limits(max_connections=64))
                sides: dict[str, Callable[[], Awaitable[object]]] = {
                    "conch's hop (TritonHop.invoke)": lambda: hop.invoke(target, body, content_type),
                    "httpx AsyncClient.post": lambda: client.post(url, content=body, headers=headers),
                }
                session: Any = None
                try:
                    import aiohttp
                except ImportError:
                    aiohttp = None
                if aiohttp is not None:
                    session = aiohttp.ClientSession()

                    async def with_aiohttp() -> bytes:
                        async with session.post(url, data=body, headers=headers) as answer:
                            return bytes(await answer.read())

                    sides["aiohttp ClientSession.post"] = with_aiohttp
                for index in range(args.rounds):
                    for side, call in (sides.items() if index % 2 == 0 else reversed(sides.items())):
                        for in_flight in (1, 8):
                            rate, cpu = await rate_and_cpu(call, in_flight, args.calls)
                            samples.setdefault(f"{side}, {in_flight} in flight", []).append((rate, cpu))
                            print(f"round {index + 1} {side}, {in_flight} in flight: {rate:.0f} calls/s, "
                                  f"{cpu * 1e6:.0f} us CPU per call", flush=True)
                await hop.close()
                await client.aclose()
                if session is not None:
                    await session.close()

            uvloop.run(run())
    rows = [[side, round(statistics.median(r for r, _ in runs)), round(statistics.median(c for _, c in runs) * 1e6)]
            for side, runs in sorted(samples.items())]
    return finish("hop_clients", ["side", "calls/s", "loop thread CPU us/call"], rows,
                  {"rounds": args.rounds, "calls": args.calls, "runs": samples})


if __name__ == "__main__":
    sys.exit(main())
