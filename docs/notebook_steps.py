"""The step code of docs/notebook.ipynb: Python-backend steps live in a module of their own (the generated
model.py imports them inside Triton, where conch is not installed)."""

import numpy as np


def scale(x):
    return {"y": (x * np.float32(2)).astype(np.float32)}


def shift(y):
    return {"z": (y + np.float32(1)).astype(np.float32)}
