"""The text_embeddings ensemble on the local Triton vs the same work in one process, batch 1 (one
sentence per request): the ensemble over N connections (wrk, each one request at a time) against N
caller threads in one process, for the shipped settings and the alternatives tried: A and B alternate,
the table shows medians of requests/s and of CPU time per request (server and stubs vs this process;
steadier than requests/s on a shared machine) and their ratios.

    python benchmarks/text_ensemble.py [--seconds 2] [--rounds 5] [--variants shipped ...] [--connections 1 8]
    python benchmarks/text_ensemble.py --breakdown [--connections 1 8]   # where the CPU of a request goes

--breakdown serves the shipped ensemble only and splits its CPU per request by process (tritonserver:
HTTP, the ensemble scheduler and the Python backend's shared-memory hops on the server side; each
Python stub: its step's code plus its side of the hops), beside the in-process CPU per request.

Needs wrk (Debian: apt-get install wrk). Writes benchmarks/results/text_ensemble.json.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from _common import ROOT, alternate, finish, kserve_json, median, table, tree_cpu_seconds, wrk, wrk_run

sys.path.insert(0, str(ROOT / "ensembles"))

SENTENCE = "Triton runs ensembles of models behind one endpoint."


def variants() -> dict[str, dict[str, Any]]:
    from conch import DynamicBatching, InstanceGroup

    return {
        "shipped": {},  # ensembles/text_embeddings.py as it is
        "seed: delay 500us, 2 ORT threads": {
            "dynamic_batching": DynamicBatching(preferred_batch_size=(8, 16), max_queue_delay_microseconds=500),
            "parameters": {"intra_op_thread_count": "2"}},
        "no dyn. batching, 2 ORT threads": {"parameters": {"intra_op_thread_count": "2"}},
        "no dyn. batching, 1 ORT thread": {"parameters": {"intra_op_thread_count": "1"}},
        "dyn. batching no delay, 2 ORT threads": {"dynamic_batching": DynamicBatching(),
                                                  "parameters": {"intra_op_thread_count": "2"}},
        "1 instance x 1 ORT thread (shipped before issue 23)": {
            "dynamic_batching": DynamicBatching(preferred_batch_size=(8, 16)),
            "instance_group": InstanceGroup("KIND_CPU", count=1), "parameters": {"intra_op_thread_count": "1"}},
    }


def declare(name: str, settings: dict[str, Any]):  # type: ignore[no-untyped-def]
    import text_embeddings as shipped
    from _minilm import HIDDEN, MAX_BATCH, TEXT_ENV, export_onnx, pool, tokenize

    from conch import Ensemble, OnnxStep

    if not settings:
        encoder = shipped.encoder
    else:
        encoder = OnnxStep("encoder", export_onnx, inputs=shipped.encoder.inputs, outputs=shipped.encoder.outputs,
                           max_batch_size=MAX_BATCH, **settings)
    ens = Ensemble(name, max_batch_size=MAX_BATCH, env=TEXT_ENV)
    ids, mask = tokenize(ens.input("TEXT", "BYTES", [1]))
    ens.output("EMBEDDINGS", pool(encoder(input_ids=ids, attention_mask=mask), mask), dtype="FP32", dims=[HIDDEN])
    return ens


class InProcess:
    """The same three steps called directly: tokenizer, ONNX Runtime (set up as the local stand-in sets
    it up, with the variant's thread count), mean pooling."""

    def __init__(self, parameters: dict[str, str]) -> None:
        from _minilm import export_onnx, tokenizer_file
        from text_steps import Tokenize, mean_pool

        from conch.backends.standins.onnxruntime_runner import OnnxRuntimeRunner

        files = {"tokenizer.json": str(tokenizer_file()), "model.onnx": str(export_onnx())}

        class Context:
            def __init__(self) -> None:
                self.parameters = parameters

            def file(self, name: str) -> str:
                return files[name]

        self.tokenize, self.encode, self.pool = Tokenize(), OnnxRuntimeRunner(), mean_pool
        self.tokenize.setup(Context())
        self.encode.setup(Context())

    def __call__(self, text: np.ndarray) -> np.ndarray:
        tokens = self.tokenize(TEXT=text)
        hidden = self.encode(**tokens)["last_hidden_state"]
        return np.asarray(self.pool(hidden, tokens["attention_mask"])["embeddings"])

    def rate(self, seconds: float, cpu_ms: list[float] | None = None, callers: int = 1) -> float:
        """Requests/s of ``callers`` threads, each calling one request after another (the tokenizer and
        ONNX Runtime release the GIL, so two cores are used as a served ensemble uses them); appends this
        process's CPU milliseconds per request."""
        text = np.array([[SENTENCE.encode()]], dtype=object)
        counts = [0] * callers
        start, cpu = time.perf_counter(), time.process_time()

        def loop(index: int) -> None:
            while time.perf_counter() - start < seconds:
                self(text)
                counts[index] += 1

        threads = [threading.Thread(target=loop, args=(i,)) for i in range(callers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        count = sum(counts)
        if cpu_ms is not None:
            cpu_ms.append((time.process_time() - cpu) / count * 1e3)
        return count / (time.perf_counter() - start)


def served(url: str, body: bytes, seconds: int, server_pid: int, cpu_ms: list[float], connections: int = 1) -> float:
    """Requests/s of the ensemble over ``connections`` (each one request at a time); appends the CPU
    milliseconds per request of the server and its stubs."""
    before = tree_cpu_seconds(server_pid)
    rps, count = wrk_run(url, body, "application/json", connections, seconds)
    cpu_ms.append((tree_cpu_seconds(server_pid) - before) / max(1, count) * 1e3)
    return rps


def process_cpu(server_pid: int, models: list[str]) -> dict[str, float]:
    """CPU seconds so far of tritonserver itself and of each stub, by the model it serves."""
    ticks = os.sysconf("SC_CLK_TCK")
    found: dict[str, float] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            cmdline = (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        seconds = (int(fields[11]) + int(fields[12])) / ticks
        if int(proc.name) == server_pid:
            found["tritonserver (HTTP, ensemble scheduler, server side of the hops)"] = seconds
        elif len(cmdline) > 1 and "triton_python_backend_stub" in cmdline[0]:
            model = next((m for m in models if f"/{m}/" in cmdline[1]), None)
            if model is not None:  # not another server's stub
                found[f"stub {model}"] = found.get(f"stub {model}", 0.0) + seconds
    return found


def breakdown(url: str, body: bytes, seconds: int, server_pid: int, models: list[str], local: InProcess,
              connections: list[int], rounds: int) -> int:
    """CPU ms per request by process at each connection count (medians of ``rounds``), and requests/s."""
    rows = []
    for conns in connections:
        per: dict[str, list[float]] = {}
        rates: list[float] = []
        for _ in range(rounds):
            before = process_cpu(server_pid, models)
            rate, count = wrk_run(url, body, "application/json", conns, seconds)
            after = process_cpu(server_pid, models)
            rates.append(rate)
            for name, value in after.items():
                per.setdefault(name, []).append((value - before.get(name, 0.0)) / max(1, count) * 1e3)
        total = sum(median(v) for v in per.values())
        for name, values in sorted(per.items()):
            rows.append([conns, name, round(median(values), 3), f"{median(values) / total:.0%}"])
        rows.append([conns, "ensemble, all processes", round(total, 3), f"{median(rates):.1f} req/s"])
    for conns in connections:  # the same work in one process, with as many callers as connections
        cpu_ms: list[float] = []
        rates = [local.rate(seconds, cpu_ms, conns) for _ in range(rounds)]
        rows.append([conns, f"in-process, {conns} caller thread(s) (tokenizer + ONNX Runtime + pooling)",
                     round(median(cpu_ms), 3), f"{median(rates):.1f} req/s"])
    header = ["connections", "process", "CPU ms per request", "share / throughput"]
    return finish("text_ensemble_breakdown", header, rows, {"seconds": seconds, "rounds": rounds, "rows": rows})


HEADER = ["variant (encoder settings)", "connections / callers", "ensemble req/s", "in-process req/s",
          "ensemble/in-process", "ensemble CPU ms/req", "in-process CPU ms/req", "in-process/ensemble CPU"]


def main() -> int:
    from conch.builder.repository_build import render_repository, write_repository
    from conch.triton.mme import MultiModelClient
    from conch.triton.server import LocalTriton

    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--variants", nargs="+", default=list(variants()))
    parser.add_argument("--breakdown", action="store_true", help="the shipped ensemble's CPU per request by process")
    parser.add_argument("--connections", nargs="+", type=int, default=[1, 8])
    args = parser.parse_args()
    if args.breakdown:  # one variant: the shipped one unless named
        args.variants = args.variants[:1] if args.variants != list(variants()) else ["shipped"]

    body = kserve_json({"TEXT": np.array([[SENTENCE]], dtype=object)})
    rows, records = [], []
    with tempfile.TemporaryDirectory(prefix="conch-bench-") as tmp, LocalTriton() as server:
        client = MultiModelClient(server.sagemaker_url, server.http_url)
        for index, variant in enumerate(args.variants):
            name = f"text_{index}"
            repo_ensemble = declare(name, variants()[variant])
            repo = render_repository(repo_ensemble, "local", "24.10")
            folder = write_repository(repo, Path(tmp) / name)
            client.load(name, folder, 300)
            url = f"{server.http_url}/v2/models/{name}/infer"
            wrk(url, body, "application/json", 1, 1)  # warm
            encoder = next(c.step for c in repo_ensemble.calls if c.step.name == "encoder")
            local = InProcess(dict(encoder.settings.parameters))  # the same ONNX Runtime threads
            local.rate(1)
            assert server.process is not None
            if args.breakdown:
                models = [repo_ensemble.model_name(c.step) for c in repo_ensemble.calls]
                return breakdown(url, body, args.seconds, server.process.pid, models, local, args.connections,
                                 args.rounds)
            for conns in args.connections:  # ensemble over N connections against N caller threads
                cpu: dict[str, list[float]] = {"ensemble": [], "in-process": []}
                samples = alternate({
                    "ensemble": partial(served, url, body, args.seconds, server.process.pid, cpu["ensemble"], conns),
                    "in-process": partial(local.rate, args.seconds, cpu["in-process"], conns),
                }, args.rounds)
                ens, inp = median(samples["ensemble"]), median(samples["in-process"])
                ens_cpu, inp_cpu = median(cpu["ensemble"]), median(cpu["in-process"])
                rows.append([variant, conns, round(ens, 1), round(inp, 1), round(ens / inp, 2), round(ens_cpu, 2),
                             round(inp_cpu, 2), round(inp_cpu / ens_cpu, 2)])
                records.append({"variant": variant, "connections": conns, "ensemble_rps": samples["ensemble"],
                                "in_process_rps": samples["in-process"], "ratio_of_medians": ens / inp,
                                "ensemble_cpu_ms": cpu["ensemble"], "in_process_cpu_ms": cpu["in-process"],
                                "cpu_ratio": inp_cpu / ens_cpu})
                print(table(HEADER, rows[-1:]), flush=True)
            client.unload(name)  # one variant's stubs at a time on the two cores
    return finish("text_ensemble", HEADER, rows, {"seconds": args.seconds, "rounds": args.rounds, "rows": records})


if __name__ == "__main__":
    sys.exit(main())
