"""Tensor specs (what a model declares) and tensor handles (what wiring passes around)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from conch.ensembles.dtypes import DType
from conch.ensembles.names import check_tensor_name
from conch.errors import DeclarationError

if TYPE_CHECKING:
    from conch.ensembles.ensemble import Ensemble, StepCall


def _dims(dims: Iterable[int], what: str) -> tuple[int, ...]:
    out = tuple(int(d) for d in dims)
    if any(d < -1 or d == 0 for d in out):
        raise DeclarationError(f"{what}: dims {list(out)} must be positive sizes or -1 for 'any size'")
    return out


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
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "dtype", DType.of(dtype))
        object.__setattr__(self, "dims", _dims(dims, f"tensor {name!r}"))
        object.__setattr__(self, "optional", bool(optional))
        object.__setattr__(self, "reshape", None if reshape is None else tuple(int(d) for d in reshape))
        if isinstance(labels, str):
            labels = Path(labels)
        if labels is not None and not isinstance(labels, Path):
            labels = tuple(str(x) for x in labels)
        object.__setattr__(self, "labels", labels)

    @property
    def label_filename(self) -> str | None:
        """The file name config.pbtxt refers to for this output's labels."""
        if self.labels is None:
            return None
        if isinstance(self.labels, Path):
            return self.labels.name
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in self.name)  # TF names hold '/'
        return f"{safe}_labels.txt"

    def renamed(self, name: str) -> Tensor:
        """The same spec under another name."""
        check_tensor_name(name, "tensor")
        return replace(self, name=name)

    def shape_text(self) -> str:
        return "[" + ", ".join(str(d) for d in self.dims) + "]"


def dims_compatible(a: Sequence[int], b: Sequence[int]) -> bool:
    """Same rank, and each pair of sizes equal or one of them -1 (Triton's wildcard)."""
    return len(a) == len(b) and all(x == y or x == -1 or y == -1 for x, y in zip(a, b, strict=True))


class TensorHandle:
    """A value flowing through an ensemble: an ensemble input or a step's output."""

    def __init__(
        self,
        ensemble: Ensemble,
        name: str,
        dtype: DType,
        dims: tuple[int, ...],
        producer: StepCall | None = None,
        output_name: str | None = None,
    ) -> None:
        self.ensemble = ensemble
        self.name = name
        self.dtype = dtype
        self.dims = dims
        self.producer = producer
        self.output_name = output_name

    def describe(self) -> str:
        if self.producer is None:
            return f"ensemble input {self.name!r}"
        return f"output {self.output_name!r} of step {self.producer.step.name!r}"

    def __repr__(self) -> str:
        dims = ", ".join(str(d) for d in self.dims)
        return f"<TensorHandle {self.describe()} {self.dtype.wire}[{dims}] in {self.ensemble.name!r}>"

    def __iter__(self) -> Any:
        raise TypeError(
            f"{self.describe()} is a single tensor handle; a step with one output returns one handle, "
            "so do not unpack it"
        )


def as_array(value: Any, dtype: DType) -> np.ndarray:
    """A sample value as a numpy array of the tensor's dtype (str/bytes lists become object arrays)."""
    if dtype is DType.BYTES:
        arr = np.array(value, dtype=object)
        return np.vectorize(lambda v: v.encode() if isinstance(v, str) else bytes(v), otypes=[object])(arr)
    return np.asarray(value, dtype=dtype.numpy)
