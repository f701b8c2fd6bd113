"""Python-backend step code for the text examples. This module runs inside Triton, so it imports only
numpy and tokenizers (never conch)."""

import numpy as np

MAX_TOKENS = 256  # all-MiniLM-L6-v2's max_seq_length


class Tokenize:
    """Sentences (BYTES [N, 1]) -> input_ids and attention_mask (INT64 [N, L]), padded per batch."""

    def setup(self, context):
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_file(context.file("tokenizer.json"))
        self.tokenizer.enable_truncation(max_length=MAX_TOKENS)
        self.tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")

    def __call__(self, TEXT):
        texts = [row[0].decode("utf-8") if isinstance(row[0], bytes) else str(row[0]) for row in TEXT]
        encodings = self.tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        return {"input_ids": ids, "attention_mask": mask}


def mean_pool(token_embeddings, attention_mask):
    """Mean of the token embeddings under the attention mask, L2-normalised: sentence embeddings."""
    mask = attention_mask[..., None].astype(np.float32)
    summed = (token_embeddings * mask).sum(axis=1)
    counts = np.clip(mask.sum(axis=1), 1e-9, None)
    pooled = summed / counts
    norms = np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
    return {"embeddings": (pooled / norms).astype(np.float32)}
