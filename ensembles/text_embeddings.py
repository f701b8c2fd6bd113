"""Seed 002's second ensemble: sentences -> Python tokenizer -> all-MiniLM-L6-v2 (ONNX) -> Python mean
pooling + L2 normalisation -> sentence embeddings [N, 384]."""

import numpy as np
from _minilm import SENTENCES, export_onnx, reference_embeddings, tokenizer_file
from text_steps import Tokenize, mean_pool

from conch import DynamicBatching, Ensemble, InstanceGroup, OnnxStep, PythonEnv, PythonStep, Tensor, Tolerance

MAX_BATCH = 64

tokenize = PythonStep(
    "tokenize",
    Tokenize,
    inputs=[Tensor("TEXT", "BYTES", [1])],
    outputs=[Tensor("input_ids", "INT64", [-1]), Tensor("attention_mask", "INT64", [-1])],
    files={"tokenizer.json": tokenizer_file()},
    max_batch_size=MAX_BATCH,
)

encoder = OnnxStep(
    "encoder",
    export_onnx,  # exported from the packaged weights when a build needs the file
    inputs=[Tensor("input_ids", "INT64", [-1]), Tensor("attention_mask", "INT64", [-1])],
    outputs=[Tensor("last_hidden_state", "FP32", [-1, 384])],
    max_batch_size=MAX_BATCH,
    instance_group=InstanceGroup("KIND_GPU", count=1),
    dynamic_batching=DynamicBatching(preferred_batch_size=(8, 16), max_queue_delay_microseconds=500),
)

pool = PythonStep(
    "pool",
    mean_pool,
    inputs=[Tensor("token_embeddings", "FP32", [-1, 384]), Tensor("attention_mask", "INT64", [-1])],
    outputs=[Tensor("embeddings", "FP32", [384])],
    max_batch_size=MAX_BATCH,
)

text_embeddings = Ensemble(
    "text_embeddings",
    max_batch_size=MAX_BATCH,
    description="all-MiniLM-L6-v2 sentence embeddings (tokenizer -> ONNX encoder -> mean pooling)",
    # The Triton image's Python has no tokenizers: both Python steps share one packed environment.
    env=PythonEnv(requirements=("tokenizers>=0.19,<1",)),
)
text = text_embeddings.input("TEXT", "BYTES", [1])
ids, mask = tokenize(text)
hidden = encoder(input_ids=ids, attention_mask=mask)
text_embeddings.output("EMBEDDINGS", pool(hidden, mask), dtype="FP32", dims=[384])

_COSINE = Tolerance(cosine=0.999)
text_embeddings.sample(
    "three sentences of different lengths",
    {"TEXT": np.array([[s] for s in SENTENCES], dtype=object)},
    lambda: {"EMBEDDINGS": reference_embeddings(SENTENCES)},
    _COSINE,
)
text_embeddings.sample(
    "one sentence, non-ASCII",
    {"TEXT": [["Grüße aus Zürich: naïve café ☕"]]},
    lambda: {"EMBEDDINGS": reference_embeddings(["Grüße aus Zürich: naïve café ☕"])},
    _COSINE,
)
