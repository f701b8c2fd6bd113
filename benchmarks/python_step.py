"""Generated Python step vs a hand-written per-request model.py (the seeds' loop), through the real
tritonserver: requests/s at concurrency 1, 8, 32, dynamic batching off and on, for x*2 on FP32[16] and
for the MiniLM tokenizer (real per-call work). A and B alternate; the table shows medians of requests/s and, steadier on
a shared machine, of the stub's CPU time per request (read from /proc).

    python benchmarks/python_step.py [--seconds 3] [--rounds 3]

Needs wrk (Debian: apt-get install wrk). Writes benchmarks/results/python_step.json.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from functools import partial
from pathlib import Path

import numpy as np
from _common import ROOT, alternate, finish, kserve_json, median, stub_cpu_seconds, table, wrk, wrk_run

sys.path.insert(0, str(ROOT / "ensembles"))

HAND_DOUBLE = '''import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "x").as_numpy()
            y = pb_utils.Tensor("y", (x * 2).astype(np.float32))
            responses.append(pb_utils.InferenceResponse(output_tensors=[y]))
        return responses
'''

HAND_TOKENIZE = '''import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        from tokenizers import Tokenizer

        here = os.path.dirname(os.path.abspath(__file__))
        self.tokenizer = Tokenizer.from_file(os.path.join(here, "files", "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length=256)
        self.tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")

    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()
            encodings = self.tokenizer.encode_batch([row[0].decode("utf-8") for row in text])
            ids = np.array([e.ids for e in encodings], dtype=np.int64)
            mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
            responses.append(pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor("input_ids", ids), pb_utils.Tensor("attention_mask", mask)]))
        return responses
'''


HEADER = ["step", "dyn.batch", "conc", "generated req/s", "hand req/s", "generated/hand",
          "generated stub CPU us/req", "hand stub CPU us/req", "hand/generated CPU"]


def measure(url: str, stub: str, body: bytes, conns: int, seconds: int, cpu_us: list[float]) -> float:
    """Requests/s of one wrk run; appends the stub's CPU microseconds per request to ``cpu_us``."""
    before = stub_cpu_seconds(stub)
    rps, count = wrk_run(url, body, "application/json", conns, seconds)
    cpu_us.append((stub_cpu_seconds(stub) - before) / max(1, count) * 1e6)
    return rps


def declare(kind: str, name: str, batching: bool):  # type: ignore[no-untyped-def]
    from conch import DynamicBatching, Ensemble, PythonStep, Tensor

    settings = {"dynamic_batching": DynamicBatching()} if batching else {}
    ens = Ensemble(name, max_batch_size=64)
    if kind == "double":
        from bench_steps import double

        step = PythonStep("step", double, inputs=[Tensor("x", "FP32", [16])], outputs=[Tensor("y", "FP32", [16])],
                          max_batch_size=64, **settings)  # type: ignore[arg-type]
        ens.output("Y", step(ens.input("X", "FP32", [16])))
    else:
        from _minilm import TEXT_ENV, tokenizer_file
        from text_steps import Tokenize

        step = PythonStep("step", Tokenize, inputs=[Tensor("TEXT", "BYTES", [1])],
                          outputs=[Tensor("input_ids", "INT64", [-1]), Tensor("attention_mask", "INT64", [-1])],
                          files={"tokenizer.json": tokenizer_file()}, max_batch_size=64, env=TEXT_ENV,
                          **settings)  # type: ignore[arg-type]
        ids, mask = step(ens.input("TEXT", "BYTES", [1]))
        ens.output("IDS", ids)
        ens.output("MASK", mask)
    return ens


def main() -> int:
    from conch.builder.repository_build import render_repository, write_repository
    from conch.triton.mme import MultiModelClient
    from conch.triton.server import LocalTriton

    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--kinds", nargs="+", default=["double", "tokenize"])
    args = parser.parse_args()

    bodies = {
        "double": kserve_json({"x": np.arange(16, dtype=np.float32).reshape(1, 16)}),
        "tokenize": kserve_json({"TEXT": np.array([["Triton runs ensembles of models behind one endpoint."]],
                                                  dtype=object)}),
    }
    hand = {"double": HAND_DOUBLE, "tokenize": HAND_TOKENIZE}
    rows, records = [], []
    with tempfile.TemporaryDirectory(prefix="conch-bench-") as tmp, LocalTriton() as server:
        client = MultiModelClient(server.sagemaker_url, server.http_url)
        for kind in args.kinds:
            for batching in (False, True):
                urls, stubs = {}, {}
                for who in ("generated", "hand-written"):
                    name = f"{kind}_{'db' if batching else 'nodb'}_{who[:3]}"
                    folder = write_repository(render_repository(declare(kind, name, batching), "local", "24.10"),
                                              Path(tmp) / name)
                    if who == "hand-written":
                        (folder / f"{name}__step" / "1" / "model.py").write_text(hand[kind])
                    client.load(f"{name}.tar.gz", folder, 300)
                    urls[who] = f"{server.http_url}/v2/models/{name}__step/infer"
                    stubs[who] = f"/{name}__step/1/model.py"
                for conns in args.concurrency:
                    body = bodies[kind]
                    cpu: dict[str, list[float]] = {who: [] for who in urls}

                    for url in urls.values():  # warm both
                        wrk(url, body, "application/json", conns, 1)
                    cases = {who: partial(measure, urls[who], stubs[who], body, conns, args.seconds, cpu[who])
                             for who in urls}
                    samples = alternate(cases, args.rounds)
                    gen, hnd = median(samples["generated"]), median(samples["hand-written"])
                    gen_cpu, hnd_cpu = median(cpu["generated"]), median(cpu["hand-written"])
                    label = "on" if batching else "off"
                    rows.append([kind, label, conns, round(gen), round(hnd), round(gen / hnd, 2),
                                 round(gen_cpu), round(hnd_cpu), round(hnd_cpu / gen_cpu, 2)])
                    records.append({"step": kind, "dynamic_batching": batching, "concurrency": conns,
                                    "generated_rps": samples["generated"], "hand_rps": samples["hand-written"],
                                    "ratio_of_medians": gen / hnd, "generated_stub_cpu_us": cpu["generated"],
                                    "hand_stub_cpu_us": cpu["hand-written"], "cpu_ratio": hnd_cpu / gen_cpu})
                    print(table(HEADER, rows[-1:]), flush=True)
    return finish("python_step", HEADER, rows, {"seconds": args.seconds, "rounds": args.rounds, "rows": records})


if __name__ == "__main__":
    sys.exit(main())
