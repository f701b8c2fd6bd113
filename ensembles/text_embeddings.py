"""Seed 002's second ensemble: sentences -> Python tokenizer -> all-MiniLM-L6-v2 (ONNX) -> Python mean
pooling + L2 normalisation -> sentence embeddings [N, 384]."""

import numpy as np
from _minilm import HIDDEN, MAX_BATCH, SENTENCES, TEXT_ENV, export_onnx, pool, reference_embeddings, tokenize

from conch import DynamicBatching, Ensemble, InstanceGroup, OnnxStep, Tensor, Tolerance

# tokenize and pool are Python steps declared in _minilm.py (shared with bert_torchscript.py); their code
# is in text_steps.py, which runs inside Triton.

encoder = OnnxStep(
    "encoder",
    export_onnx,  # exported from the packaged weights when a build needs the file
    inputs=[Tensor("input_ids", "INT64", [-1]), Tensor("attention_mask", "INT64", [-1])],
    outputs=[Tensor("last_hidden_state", "FP32", [-1, HIDDEN])],
    max_batch_size=MAX_BATCH,
    # Two execution instances: on a GPU one copies a batch in while the other computes; on the local
    # target (KIND_CPU there) one instance with one ONNX Runtime thread keeps the encoder on one core, and
    # the ensemble served 0.63x the requests/s of the same work in one process with 8 callers; with two
    # it served 0.98x (benchmarks/text_ensemble.py --breakdown, quiet machine).
    instance_group=InstanceGroup("KIND_GPU", count=2),
    # Fastest measured on 2 cores (benchmarks/text_ensemble.py): batch what is queued without waiting
    # (a queue delay only adds latency when requests come one at a time), and one ONNX Runtime thread
    # per instance, so that the stubs share the cores instead of spinning; Triton's onnxruntime backend
    # reads the same parameter in production.
    dynamic_batching=DynamicBatching(preferred_batch_size=(8, 16)),
    parameters={"intra_op_thread_count": "1"},
)

text_embeddings = Ensemble(
    "text_embeddings",
    max_batch_size=MAX_BATCH,
    description="all-MiniLM-L6-v2 sentence embeddings (tokenizer -> ONNX encoder -> mean pooling)",
    env=TEXT_ENV,  # tokenize and pool share one packed environment (the image's Python lacks tokenizers)
)
text = text_embeddings.input("TEXT", "BYTES", [1])
ids, mask = tokenize(text)
hidden = encoder(input_ids=ids, attention_mask=mask)
text_embeddings.output("EMBEDDINGS", pool(hidden, mask), dtype="FP32", dims=[HIDDEN])

_COSINE = Tolerance(cosine=0.999)
text_embeddings.sample(
    "three sentences of different lengths",
    {"TEXT": np.array([[s] for s in SENTENCES], dtype=object)},
    lambda: {"EMBEDDINGS": reference_embeddings(SENTENCES)},
    _COSINE,
    pure=True,  # pure: the weights come from an installed package, part of the key
)
text_embeddings.sample(
    "one sentence, non-ASCII",
    {"TEXT": [["Grüße aus Zürich: naïve café ☕"]]},
    lambda: {"EMBEDDINGS": reference_embeddings(["Grüße aus Zürich: naïve café ☕"])},
    _COSINE,
    pure=True,  # pure: the weights come from an installed package, part of the key
)
