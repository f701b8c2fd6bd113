"""The one dtype enum: Triton config names, KServe wire names and numpy dtypes in one place."""

from __future__ import annotations

import enum
from typing import Any

import numpy as np

from conch.errors import DeclarationError


class DType(enum.Enum):
    """A Triton tensor data type; the value is the KServe wire name (``FP32``)."""

    BOOL = "BOOL"
    UINT8 = "UINT8"
    UINT16 = "UINT16"
    UINT32 = "UINT32"
    UINT64 = "UINT64"
    INT8 = "INT8"
    INT16 = "INT16"
    INT32 = "INT32"
    INT64 = "INT64"
    FP16 = "FP16"
    FP32 = "FP32"
    FP64 = "FP64"
    BYTES = "BYTES"

    @property
    def wire(self) -> str:
        """KServe v2 protocol name, e.g. ``FP32``."""
        return self.value

    @property
    def triton(self) -> str:
        """config.pbtxt name, e.g. ``TYPE_FP32`` (``TYPE_STRING`` for BYTES)."""
        return "TYPE_STRING" if self is DType.BYTES else f"TYPE_{self.value}"

    @property
    def numpy(self) -> np.dtype[Any]:
        """The numpy dtype tensors of this type travel as (object for BYTES)."""
        return np.dtype(_NUMPY[self])

    @property
    def numpy_name(self) -> str:
        """``str(self.numpy)`` (``float32``), without making the dtype (generated model.py names them)."""
        return _NUMPY[self]

    @classmethod
    def of(cls, value: DType | str | np.dtype[Any] | type) -> DType:
        """Accept a DType, a wire name, a Triton name, or a numpy dtype; say what is accepted if not."""
        if isinstance(value, DType):
            return value
        if isinstance(value, str):
            key = value.upper()
            if key.startswith("TYPE_"):
                key = "BYTES" if key == "TYPE_STRING" else key[len("TYPE_"):]
            if key in cls.__members__:
                return cls[key]
            for member, name in _NUMPY.items():
                if name == value:
                    return member
        else:
            try:
                kind = np.dtype(value)
            except TypeError:
                kind = None
            if kind is not None:
                if kind.kind in ("O", "S", "U"):
                    return cls.BYTES
                for member, name in _NUMPY.items():
                    if np.dtype(name) == kind:
                        return member
        names = ", ".join(m.value for m in cls)
        raise DeclarationError(f"unknown dtype {value!r}: use one of {names} (or a numpy dtype)")


_NUMPY: dict[DType, str] = {
    DType.BOOL: "bool",
    DType.UINT8: "uint8",
    DType.UINT16: "uint16",
    DType.UINT32: "uint32",
    DType.UINT64: "uint64",
    DType.INT8: "int8",
    DType.INT16: "int16",
    DType.INT32: "int32",
    DType.INT64: "int64",
    DType.FP16: "float16",
    DType.FP32: "float32",
    DType.FP64: "float64",
    DType.BYTES: "object",
}
