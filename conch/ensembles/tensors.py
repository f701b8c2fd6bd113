"""Tensor specs as a model declares them, and the rules for their sizes: values, no wiring."""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from conch.ensembles.dtypes import DType
from conch.ensembles.names import check_tensor_name
from conch.errors import DeclarationError


def whole(value: object, what: str) -> int:
    """An int given as an int (not 1.5, "2" or True): 1.5 is a mistake, not a size to round."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise DeclarationError(f"{what} must be a whole number, got {value!r}")
    return operator.index(value)


def _sizes(values: Iterable[int], what: str, field: str) -> tuple[int, ...]:
    """Whole numbers, each a positive size or -1."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise DeclarationError(f"{what}: {field} must be a list of whole numbers, got {values!r}")
    values = list(values)
    out = tuple(whole(d, f"{what}: {field} {values}: each size") for d in values)
    if any(d < -1 or d == 0 for d in out):
        raise DeclarationError(f"{what}: {field} {list(out)} must be positive sizes or -1 for 'any size'")
    return out


def _dims(dims: Iterable[int], what: str) -> tuple[int, ...]:
    out = _sizes(dims, what, "dims")
    if not out:
        raise DeclarationError(f"{what}: dims [] is empty, which Triton refuses; declare [1] for one value per "
                               "request (or per batch item), with reshape=[] if the model wants a scalar")
    return out


def _reshape(reshape: Sequence[int] | None, dims: tuple[int, ...], what: str) -> tuple[int, ...] | None:
    """A reshape Triton accepts: sizes or -1, as many elements as dims, -1 where dims has -1."""
    if reshape is None:
        return None
    out = _sizes(reshape, what, "reshape")
    if out.count(-1) != dims.count(-1) or math.prod(d for d in out if d > 0) != math.prod(d for d in dims if d > 0):
        raise DeclarationError(
            f"{what}: reshape {list(out)} does not hold the same elements as dims {list(dims)}; Triton needs equal "
            "element counts (and -1 where dims has -1)"
        )
    return out


def _labels(
    labels: str | Path | Sequence[str] | None, dims: tuple[int, ...], what: str
) -> Path | tuple[str, ...] | None:
    """Label file or labels, one per class when the class count is fixed."""
    if labels is None:
        return None
    if isinstance(labels, str):
        labels = Path(labels)
    if isinstance(labels, Path):
        if not labels.is_file():
            raise DeclarationError(f"{what}: label file {labels} does not exist; give the path of a file with one "
                                   "label per line (relative paths are from the current folder)")
        count = len(labels.read_bytes().splitlines())
        source = f"label file {labels} has {count} lines"
    else:
        labels = tuple(str(x) for x in labels)
        count, source = len(labels), f"{len(labels)} labels are given"
    classes = math.prod(dims)
    if all(d > 0 for d in dims) and count != classes:
        raise DeclarationError(f"{what}: {source}, but dims {list(dims)} make {classes} classes; give one label "
                               "per class")
    return labels


@dataclass(frozen=True)
class Tensor:
    """A model input or output as config.pbtxt declares it: dims exclude the batch dimension.

    ``labels`` (outputs only) is a label file, or the labels themselves, for Triton's classification
    extension; the file is laid out next to the config and named by ``label_filename``.
    """

    name: str
    dtype: DType
    dims: tuple[int, ...]
    optional: bool = False
    reshape: tuple[int, ...] | None = None
    labels: Path | tuple[str, ...] | None = field(default=None, compare=False)

    def __init__(
        self,
        name: str,
        dtype: DType | str | Any,
        dims: Sequence[int] = (),
        *,
        optional: bool = False,
        reshape: Sequence[int] | None = None,
        labels: str | Path | Sequence[str] | None = None,
    ) -> None:
        check_tensor_name(name, "tensor")
        what = f"tensor {name!r}"
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "dtype", DType.of(dtype))
        object.__setattr__(self, "dims", _dims(dims, what))
        object.__setattr__(self, "optional", bool(optional))
        object.__setattr__(self, "reshape", _reshape(reshape, self.dims, what))
        object.__setattr__(self, "labels", _labels(labels, self.dims, what))

    @classmethod
    def as_written(cls, name: str, dtype: DType, dims: Sequence[int], *, optional: bool = False,
                   reshape: Sequence[int] | None = None) -> Tensor:
        """A tensor as a config file writes it, unchecked: a config read back (`conch check`) may hold what
        Triton accepts and conch would not declare (a name, dims or reshape conch's rules refuse)."""
        tensor = object.__new__(cls)
        for key, value in (("name", name), ("dtype", dtype), ("dims", tuple(dims)), ("optional", bool(optional)),
                           ("reshape", None if reshape is None else tuple(reshape)), ("labels", None)):
            object.__setattr__(tensor, key, value)
        return tensor

    @property
    def label_filename(self) -> str | None:
        """The file name config.pbtxt refers to for this output's labels."""
        if self.labels is None:
            return None
        if isinstance(self.labels, Path):
            return self.labels.name
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in self.name)  # TF names hold '/'
        return f"{safe}_labels.txt"


def dims_compatible(a: Sequence[int], b: Sequence[int]) -> bool:
    """Same rank, and each pair of sizes equal or one of them -1 (Triton's wildcard)."""
    return len(a) == len(b) and all(x == y or x == -1 or y == -1 for x, y in zip(a, b, strict=True))


def as_array(value: Any, dtype: DType) -> np.ndarray:
    """A sample value as a numpy array of the tensor's dtype (str/bytes lists become object arrays)."""
    if dtype is DType.BYTES:
        arr = np.array(value, dtype=object)
        return np.vectorize(lambda v: v.encode() if isinstance(v, str) else bytes(v), otypes=[object])(arr)
    return np.asarray(value, dtype=dtype.numpy)
