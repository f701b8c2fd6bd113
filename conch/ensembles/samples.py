"""Sample payloads with expected outputs, the tolerance they are compared with, and a JSON encoding
that survives inside an archive so the archive can be replayed on its own."""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from conch.ensembles.dtypes import DType
from conch.errors import DeclarationError

Arrays = dict[str, np.ndarray]


DEFAULT_ATOL = DEFAULT_RTOL = 1e-5


@dataclass(frozen=True)
class Tolerance:
    """How replayed outputs are compared: ``cosine`` (min per-row similarity), ``argmax`` (equal class
    along the last axis), and/or element-wise ``atol``/``rtol``. Element-wise closeness is checked when
    neither cosine nor argmax is asked for (with 1e-5 defaults), or when atol/rtol are given alongside
    them, so ``Tolerance(argmax=True, atol=1e-4)`` asks for both. BYTES outputs are compared exactly."""

    atol: float | None = None
    rtol: float | None = None
    cosine: float | None = None
    argmax: bool = False

    @property
    def elementwise(self) -> bool:
        return (self.cosine is None and not self.argmax) or self.atol is not None or self.rtol is not None

    @property
    def bounds(self) -> tuple[float, float]:
        """(atol, rtol) of the element-wise check."""
        atol = DEFAULT_ATOL if self.atol is None else self.atol
        rtol = DEFAULT_RTOL if self.rtol is None else self.rtol
        return atol, rtol

    def describe(self) -> str:
        parts = []
        if self.cosine is not None:
            parts.append(f"cosine>={self.cosine}")
        if self.argmax:
            parts.append("argmax equal")
        if self.elementwise:
            atol, rtol = self.bounds
            parts.append(f"atol={atol:g} rtol={rtol:g}")
        return ", ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {"atol": self.atol, "rtol": self.rtol, "cosine": self.cosine, "argmax": self.argmax}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Tolerance:
        return cls(data.get("atol"), data.get("rtol"), data.get("cosine"), bool(data.get("argmax")))


@dataclass(frozen=True)
class Comparison:
    """The verdict on one output: passed or not, with a number a person can read."""

    output: str
    passed: bool
    detail: str


def compare(name: str, got: np.ndarray, want: np.ndarray, tol: Tolerance) -> Comparison:
    """Compare one replayed output against its expected value."""
    if got.shape != want.shape:
        return Comparison(name, False, f"shape {list(got.shape)} != expected {list(want.shape)}")
    if want.dtype == object or got.dtype == object:
        for index, (a, b) in enumerate(zip(got.ravel(), want.ravel(), strict=True)):
            if _as_bytes(a) != _as_bytes(b):
                where = list(np.unravel_index(index, got.shape))
                return Comparison(name, False, f"element {where}: got {_as_bytes(a)!r}, expected {_as_bytes(b)!r}")
        return Comparison(name, True, "exact")
    g, w = got.astype(np.float64), want.astype(np.float64)
    passed, details = True, []
    if tol.cosine is not None:
        rows_g = g.reshape(g.shape[0], -1) if g.ndim > 1 else g.reshape(1, -1)
        rows_w = w.reshape(rows_g.shape)
        norms = np.linalg.norm(rows_g, axis=1) * np.linalg.norm(rows_w, axis=1)
        cos = np.sum(rows_g * rows_w, axis=1) / np.where(norms == 0, 1.0, norms)
        worst = float(cos.min()) if cos.size else 1.0
        passed &= worst >= tol.cosine
        details.append(f"min cosine {worst:.7f}")
    if tol.argmax:
        same = bool(np.array_equal(np.argmax(g, axis=-1), np.argmax(w, axis=-1)))
        passed &= same
        details.append(f"argmax {'equal' if same else 'differs'}")
    err = float(np.max(np.abs(g - w))) if g.size else 0.0
    if tol.elementwise:
        atol, rtol = tol.bounds
        passed &= bool(np.allclose(g, w, atol=atol, rtol=rtol))
    details.append(f"max abs err {err:.3g}")
    return Comparison(name, passed, ", ".join(details))


def _as_bytes(value: Any) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


@dataclass
class Sample:
    """One payload for an ensemble and what it must answer. ``expected`` may be a function, so that
    costly reference outputs (running the model directly) are computed only when a build needs them."""

    name: str
    inputs: Arrays
    expected: Mapping[str, Any] | Callable[[], Mapping[str, Any]]
    tolerance: Tolerance

    def __post_init__(self) -> None:
        if not callable(self.expected):
            self._checked(self.expected)

    def expected_arrays(self) -> Arrays:
        value = self._checked(self.expected() if callable(self.expected) else self.expected)
        return {k: np.asarray(v) if not isinstance(v, np.ndarray) else v for k, v in value.items()}

    def _checked(self, value: Any) -> Mapping[str, Any]:
        """A sample with nothing to compare would replay green against any answer, so it is refused."""
        if not isinstance(value, Mapping):
            raise DeclarationError(f"sample {self.name!r}: expected outputs must be a mapping name -> array")
        if not value:
            raise DeclarationError(
                f"sample {self.name!r}: no expected outputs, so its replay would pass whatever the ensemble "
                "answers; give the expected value of at least one output"
            )
        return value


def encode_array(array: np.ndarray, dtype: DType) -> dict[str, Any]:
    """A JSON-safe, exact encoding of a tensor (base64 of little-endian bytes; BYTES element-wise)."""
    if dtype is DType.BYTES:
        items = [base64.b64encode(_as_bytes(v)).decode() for v in array.ravel()]
        return {"datatype": dtype.wire, "shape": list(array.shape), "items": items}
    data = np.ascontiguousarray(array, dtype=dtype.numpy.newbyteorder("<"))
    return {"datatype": dtype.wire, "shape": list(array.shape), "b64": base64.b64encode(data.tobytes()).decode()}


def decode_array(data: Mapping[str, Any]) -> np.ndarray:
    """Inverse of :func:`encode_array`."""
    dtype = DType.of(data["datatype"])
    shape = tuple(data["shape"])
    if dtype is DType.BYTES:
        flat = np.empty(len(data["items"]), dtype=object)
        flat[:] = [base64.b64decode(s) for s in data["items"]]
        return flat.reshape(shape)
    raw = base64.b64decode(data["b64"])
    return np.frombuffer(raw, dtype=dtype.numpy.newbyteorder("<")).astype(dtype.numpy).reshape(shape)
