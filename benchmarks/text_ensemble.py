"""The text_embeddings ensemble on the local Triton vs the same work in one process, batch 1 (one
sentence per request, one request at a time), for the shipped settings and the alternatives tried: A
and B alternate, the table shows medians of requests/s and their ratio.

    python benchmarks/text_ensemble.py [--seconds 2] [--rounds 5] [--variants shipped ...]

Needs wrk (Debian: apt-get install wrk). Writes benchmarks/results/text_ensemble.json.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from _common import ROOT, alternate, kserve_json, median, table, write_json, wrk

sys.path.insert(0, str(ROOT / "ensembles"))

SENTENCE = "Triton runs ensembles of models behind one endpoint."


def variants() -> dict[str, dict[str, Any]]:
    from conch import DynamicBatching, InstanceGroup

    return {
        "shipped": {},  # ensembles/text_embeddings.py as it is
        "delay 500us, 2 ORT threads": {
            "dynamic_batching": DynamicBatching(preferred_batch_size=(8, 16), max_queue_delay_microseconds=500),
            "parameters": {"intra_op_thread_count": "2"}},
        "no dyn. batching, 2 ORT threads": {"parameters": {"intra_op_thread_count": "2"}},
        "no dyn. batching, 1 ORT thread": {"parameters": {"intra_op_thread_count": "1"}},
        "dyn. batching no delay, 2 ORT threads": {"dynamic_batching": DynamicBatching(),
                                                  "parameters": {"intra_op_thread_count": "2"}},
        "2 instances x 1 ORT thread": {"dynamic_batching": DynamicBatching(),
                                       "instance_group": InstanceGroup("KIND_CPU", count=2),
                                       "parameters": {"intra_op_thread_count": "1"}},
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

    def rate(self, seconds: float) -> float:
        text = np.array([[SENTENCE.encode()]], dtype=object)
        count, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            self(text)
            count += 1
        return count / (time.perf_counter() - start)


def main() -> int:
    from conch.builder.build import render_repository, write_repository
    from conch.harness.mme import MultiModelClient
    from conch.harness.server import LocalTriton

    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--variants", nargs="+", default=list(variants()))
    args = parser.parse_args()

    body = kserve_json({"TEXT": np.array([[SENTENCE]], dtype=object)})
    rows, records = [], []
    with tempfile.TemporaryDirectory(prefix="conch-bench-") as tmp, LocalTriton() as server:
        client = MultiModelClient(server.sagemaker_url, server.http_url)
        for index, variant in enumerate(args.variants):
            name = f"text_{index}"
            repo = render_repository(declare(name, variants()[variant]), "local", "24.10")
            folder = write_repository(repo, Path(tmp) / name)
            client.load(name, folder, 300)
            url = f"{server.http_url}/v2/models/{name}/infer"
            wrk(url, body, "application/json", 1, 1)  # warm
            local = InProcess(dict(variants()[variant].get("parameters", {})))
            local.rate(1)
            samples = alternate({
                "ensemble": lambda u=url: wrk(u, body, "application/json", 1, args.seconds),
                "in-process": lambda p=local: p.rate(args.seconds),
            }, args.rounds)
            client.unload(name)  # one variant's stubs at a time on the two cores
            ens, inp = median(samples["ensemble"]), median(samples["in-process"])
            rows.append([variant, round(ens, 1), round(inp, 1), round(ens / inp, 2)])
            records.append({"variant": variant, "ensemble_rps": samples["ensemble"],
                            "in_process_rps": samples["in-process"], "ratio_of_medians": ens / inp})
            print(table(["variant", "ensemble req/s", "in-process req/s", "ratio"], rows[-1:]), flush=True)
    print()
    print(table(["variant (encoder settings)", "ensemble req/s", "in-process req/s", "ensemble/in-process"], rows))
    path = write_json("text_ensemble", {"seconds": args.seconds, "rounds": args.rounds, "rows": records})
    print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
