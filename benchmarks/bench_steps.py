"""Step code the benchmarks declare; runs inside Triton, so it imports numpy only."""

import numpy as np


def double(x):
    return {"y": (x * 2).astype(np.float32)}
