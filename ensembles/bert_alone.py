"""Seed 000's model as the seed deploys it: a BERT encoder (all-MiniLM-L6-v2 here) traced to TorchScript, alone
in its archive. A DAG of one step whose tensors are the ensemble's is built as that model alone (a single-model
archive, served as the TargetModel: no ensemble scheduler hop); callers send token ids and the attention mask
and get the last hidden state [N, L, 384]."""

from functools import cache

import numpy as np
from _minilm import MAX_BATCH, SENTENCES, bert, encoder, tokenizer_file

from conch import Ensemble, Tolerance

bert_alone = Ensemble(
    "bert_alone",
    max_batch_size=MAX_BATCH,
    description="all-MiniLM-L6-v2 (TorchScript, pytorch_libtorch) alone: token ids -> last hidden state",
)
tokens = bert(input_ids=bert_alone.input("input_ids", "INT64", [-1]),
              attention_mask=bert_alone.input("attention_mask", "INT64", [-1]))
bert_alone.output("OUTPUT__0", tokens)


@cache
def _tokenized(sentences: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Token ids and attention mask of ``sentences``, padded to the longest (the packaged tokenizer)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_file()))
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
    encodings = tokenizer.encode_batch(list(sentences))
    return {"input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64)}


def _hidden(sentences: tuple[str, ...]) -> dict[str, np.ndarray]:
    """The last hidden state computed directly with torch from the same weights."""
    import torch

    batch = _tokenized(sentences)
    with torch.no_grad():
        out = encoder()(torch.from_numpy(batch["input_ids"]), torch.from_numpy(batch["attention_mask"]))
    return {"OUTPUT__0": out.numpy().astype(np.float32)}


_TOLERANCE = Tolerance(atol=1e-4, rtol=1e-4)
_THREE, _ONE = tuple(SENTENCES), ("I am super happy right now to be trying out BERT.",)
bert_alone.sample("three sentences, padded", _tokenized(_THREE), lambda: _hidden(_THREE), _TOLERANCE,
                  pure=True)  # pure: the weights come from an installed package, part of the key
bert_alone.sample("the seed's sentence", _tokenized(_ONE), lambda: _hidden(_ONE), _TOLERANCE,
                  pure=True)
