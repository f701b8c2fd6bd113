"""Seed 000's BERT behind the PyTorch backend: sentences -> Python tokenizer -> all-MiniLM-L6-v2 traced to
TorchScript (forward(input_ids, attention_mask), bound by argument name) -> Python mean pooling + L2
normalisation -> sentence embeddings [N, 384]."""

import numpy as np
from _minilm import HIDDEN, MAX_BATCH, SENTENCES, TEXT_ENV, bert, pool, reference_embeddings, tokenize

from conch import Ensemble, Tolerance

bert_torchscript = Ensemble(
    "bert_torchscript",
    max_batch_size=MAX_BATCH,
    description="all-MiniLM-L6-v2 sentence embeddings (tokenizer -> TorchScript encoder -> mean pooling)",
    env=TEXT_ENV,
)
text = bert_torchscript.input("TEXT", "BYTES", [1])
ids, mask = tokenize(text)
tokens = bert(input_ids=ids, attention_mask=mask)
bert_torchscript.output("EMBEDDINGS", pool(tokens, mask), dtype="FP32", dims=[HIDDEN])

_COSINE = Tolerance(cosine=0.999)
bert_torchscript.sample(
    "three sentences of different lengths",
    {"TEXT": np.array([[s] for s in SENTENCES], dtype=object)},
    lambda: {"EMBEDDINGS": reference_embeddings(SENTENCES)},
    _COSINE,
    pure=True,  # pure: the weights come from an installed package, part of the key
)
bert_torchscript.sample(
    "one sentence",
    {"TEXT": [["I am super happy right now to be trying out BERT."]]},
    lambda: {"EMBEDDINGS": reference_embeddings(["I am super happy right now to be trying out BERT."])},
    _COSINE,
    pure=True,  # pure: the weights come from an installed package, part of the key
)
