"""Sample payloads with expected outputs, how each output is compared (``Tolerance``, ``TopK``, ``Exact``,
one for all outputs or one per output), and a JSON encoding that survives inside an archive so the
archive can be replayed on its own."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
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


@dataclass(frozen=True)
class TopK:
    """A classifier's check along the last axis, row by row: the top-1 class equal and the set of the ``k``
    highest-scoring classes equal, whatever the raw scores (ties are ranked by index)."""

    k: int = 5

    def __post_init__(self) -> None:
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 1:
            raise DeclarationError(f"TopK(k={self.k!r}): k must be a whole number of classes, 1 or more")

    def describe(self) -> str:
        return f"top-1 equal, top-{self.k} set equal"

    def fits(self, length: int, where: str) -> None:
        """DeclarationError unless an output with ``length`` classes along its last axis can be ranked."""
        if 0 <= length < self.k:
            raise DeclarationError(
                f"{where}: TopK(k={self.k}) needs at least {self.k} classes along the last axis, the output has "
                f"{length}; lower k or check it with a Tolerance"
            )


@dataclass(frozen=True)
class Exact:
    """Every element equal (what BYTES outputs always get)."""

    def describe(self) -> str:
        return "exact"


#: How one output is compared with its expected value.
OutputCheck = Tolerance | TopK | Exact
#: What ``ensemble.sample(..., tolerance=)`` takes: one check for every output, or one per output name.
ToleranceSpec = Tolerance | TopK | Exact | Mapping[str, Tolerance | TopK | Exact]
_KINDS: dict[str, type[Tolerance] | type[TopK] | type[Exact]] = {"tolerance": Tolerance, "top_k": TopK,
                                                                    "exact": Exact}


def check_to_json(check: OutputCheck) -> dict[str, Any]:
    kind = next(k for k, cls in _KINDS.items() if isinstance(check, cls))
    return {"kind": kind, **asdict(check)}


def check_from_json(data: Mapping[str, Any]) -> OutputCheck:
    kind = data.get("kind")
    if kind == "top_k":
        return TopK(int(data["k"]))
    if kind == "exact":
        return Exact()
    if kind == "tolerance":
        return Tolerance(data.get("atol"), data.get("rtol"), data.get("cosine"), bool(data.get("argmax")))
    raise ValueError(f"unknown output check {kind!r}")


def check_of(checks: OutputCheck | Mapping[str, OutputCheck], output: str, want: np.ndarray) -> OutputCheck:
    """The check of one output: BYTES outputs are compared exactly unless an Exact is asked for anyway."""
    chosen = checks.get(output, Tolerance()) if isinstance(checks, Mapping) else checks
    return Exact() if want.dtype == object else chosen


@dataclass(frozen=True)
class Comparison:
    """The verdict on one output: passed or not, with a number a person can read."""

    output: str
    passed: bool
    detail: str


def compare(name: str, got: np.ndarray, want: np.ndarray, tol: OutputCheck) -> Comparison:
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
    err = float(np.max(np.abs(g - w))) if g.size else 0.0
    if isinstance(tol, Exact):
        same = bool(np.array_equal(got, want))
        return Comparison(name, same, "exact" if same else f"differs, max abs err {err:.3g}")
    if isinstance(tol, TopK):
        return _compare_top_k(name, g, w, tol.k, err)
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
    if tol.elementwise:
        atol, rtol = tol.bounds
        passed &= bool(np.allclose(g, w, atol=atol, rtol=rtol))
    details.append(f"max abs err {err:.3g}")
    return Comparison(name, passed, ", ".join(details))


def _compare_top_k(name: str, g: np.ndarray, w: np.ndarray, k: int, err: float) -> Comparison:
    if g.ndim == 0 or g.shape[-1] < k:
        return Comparison(name, False, f"top-{k}: only {g.shape[-1] if g.ndim else 0} classes along the last axis")
    top_g = np.argsort(-g, axis=-1, kind="stable")[..., :k]
    top_w = np.argsort(-w, axis=-1, kind="stable")[..., :k]
    first = bool(np.array_equal(top_g[..., 0], top_w[..., 0]))
    same_set = bool(np.array_equal(np.sort(top_g, axis=-1), np.sort(top_w, axis=-1)))
    detail = (f"top-1 {'equal' if first else 'differs'}, top-{k} set {'equal' if same_set else 'differs'}, "
              f"max abs err {err:.3g}")
    return Comparison(name, first and same_set, detail)


def _as_bytes(value: Any) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


@dataclass
class Sample:
    """One payload for an ensemble and what it must answer. ``expected`` may be a function, so that
    costly reference outputs (running the model directly) are computed only when a build needs them; it
    runs at every build, unless ``pure=True`` says it is pure: its answer follows from its code alone (see
    ``conch.cache.pure_key``), not from files it reads, environment variables or modules outside its folder.
    ``tolerance`` is one check for every output or a mapping output name -> check (outputs left out get
    ``Tolerance()``); BYTES outputs are always compared exactly."""

    name: str
    inputs: Arrays
    expected: Mapping[str, Any] | Callable[[], Mapping[str, Any]]
    tolerance: ToleranceSpec = Tolerance()
    pure: bool = False

    def __post_init__(self) -> None:
        checks = self.tolerance.values() if isinstance(self.tolerance, Mapping) else [self.tolerance]
        if not all(isinstance(c, Tolerance | TopK | Exact) for c in checks) or (
                isinstance(self.tolerance, Mapping) and not all(isinstance(k, str) for k in self.tolerance)):
            raise DeclarationError(
                f"sample {self.name!r}: tolerance must be a Tolerance, TopK or Exact, or a mapping output name -> "
                f"one of them, not {self.tolerance!r}"
            )
        if not callable(self.expected):
            self._checked(self.expected)

    def check_for(self, output: str, dtype: DType) -> OutputCheck:
        """How ``output`` is compared: its own entry, the sample's one check, or ``Tolerance()``; BYTES exactly."""
        chosen = self.tolerance.get(output) if isinstance(self.tolerance, Mapping) else self.tolerance
        if dtype is DType.BYTES:
            return Exact()
        return chosen or Tolerance()

    def check_outputs(self, outputs: Mapping[str, tuple[DType, tuple[int, ...]]], where: str) -> None:
        """DeclarationError for a tolerance naming an unknown output, a top-k on a BYTES output or on one
        with fewer classes than k, or a numeric tolerance on a BYTES output. ``outputs``: name -> (dtype, dims)."""
        where = f"{where} sample {self.name!r}"
        if isinstance(self.tolerance, Mapping):
            unknown = sorted(set(self.tolerance) - set(outputs))
            if unknown:
                raise DeclarationError(f"{where}: tolerance for unknown output {unknown[0]!r}; the ensemble's "
                                       f"outputs are {sorted(outputs)}")
            named = dict(self.tolerance)
        else:
            named = {name: self.tolerance for name in outputs}
        for name, check in named.items():
            dtype, dims = outputs[name]
            if dtype is DType.BYTES and isinstance(check, TopK):
                raise DeclarationError(f"{where}: TopK on output {name!r}, which is BYTES (not scores); BYTES "
                                       "outputs are compared exactly: drop its entry")
            if dtype is DType.BYTES and isinstance(self.tolerance, Mapping) and isinstance(check, Tolerance):
                raise DeclarationError(f"{where}: a numeric Tolerance for output {name!r}, which is BYTES and "
                                       "compared exactly: drop its entry or give Exact()")
            if isinstance(check, TopK):
                check.fits(dims[-1] if dims else 0, f"{where}, output {name!r} (dims {list(dims)})")

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


def read_samples(path: str | Path) -> list[tuple[str, Arrays, Arrays, dict[str, OutputCheck]]]:
    """The samples of a file ``conch import`` writes beside the module it generates, each as ``(name, inputs,
    expected, checks)`` for ``Ensemble.sample``: JSON ``{"samples": [{"name", "inputs", "expected", "checks"}]}``,
    arrays in :func:`encode_array`'s exact encoding, checks as ``check_to_json`` writes them. Public: the
    generated modules call it."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        return [(str(s["name"]), {k: decode_array(v) for k, v in s["inputs"].items()},
                 {k: decode_array(v) for k, v in s["expected"].items()},
                 {k: check_from_json(v) for k, v in s["checks"].items()}) for s in data["samples"]]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise DeclarationError(f"{path}: not a samples file conch can read ({type(exc).__name__}: {exc}); it is the "
                               "file `conch import` wrote beside the module: import again, or remove the lines that "
                               "read it") from None
