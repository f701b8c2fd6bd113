"""What the Python-backend stub adds to ``triton_python_backend_utils`` from C++ (``Tensor``, ``InferenceRequest``,
``InferenceResponse``, ``TritonError``, ``Logger``), as plain Python for running a ``model.py`` in this process
(`conch run`, the build's observe runs). Only the calls a non-decoupled CPU model makes (python_backend
``src/pb_stub.cc`` and its README's "Python Backend API")."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

_log = logging.getLogger("conch.model")


class Tensor:
    """A named array (``pb_utils.Tensor(name, array)``)."""

    def __init__(self, name: str, array: Any) -> None:
        self._name = name
        self._array = np.asarray(array)

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self._array

    def shape(self) -> list[int]:
        return list(self._array.shape)

    def is_cpu(self) -> bool:
        return True


class TritonError:
    """An error a model answers a request with (``pb_utils.TritonError(message)``)."""

    UNKNOWN, INTERNAL, NOT_FOUND, INVALID_ARG, UNAVAILABLE, UNSUPPORTED, ALREADY_EXISTS, CANCELLED = range(8)

    def __init__(self, message: str, code: int = 1) -> None:
        self._message, self._code = str(message), code

    def message(self) -> str:
        return self._message

    def code(self) -> int:
        return self._code


class InferenceResponse:
    """A model's answer to one request: output tensors, or an error."""

    def __init__(self, output_tensors: Sequence[Tensor] | None = None, error: TritonError | str | None = None,
                 parameters: Any = None) -> None:
        self._outputs = list(output_tensors or [])
        self._error = TritonError(error) if isinstance(error, str) else error

    def output_tensors(self) -> list[Tensor]:
        return self._outputs

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error


class InferenceRequest:
    """One request as ``execute`` receives it: its input tensors and the outputs asked for."""

    def __init__(self, inputs: Mapping[str, np.ndarray], requested_outputs: Sequence[str], model_name: str) -> None:
        self._inputs = [Tensor(name, array) for name, array in inputs.items()]
        self._requested = list(requested_outputs)
        self._model = model_name

    def inputs(self) -> list[Tensor]:
        return self._inputs

    def requested_output_names(self) -> list[str]:
        return self._requested

    def request_id(self) -> str:
        return ""

    def correlation_id(self) -> int:
        return 0

    def flags(self) -> int:
        return 0

    def parameters(self) -> str:
        return "{}"

    def model_name(self) -> str:
        return self._model

    def is_cancelled(self) -> bool:
        return False


class Logger:
    """``pb_utils.Logger``: a model's log lines, to the ``conch.model`` logger."""

    @staticmethod
    def log(message: str, level: int = 0) -> None:
        _log.info(message)

    @staticmethod
    def log_info(message: str) -> None:
        _log.info(message)

    @staticmethod
    def log_warn(message: str) -> None:
        _log.warning(message)

    @staticmethod
    def log_error(message: str) -> None:
        _log.error(message)

    @staticmethod
    def log_verbose(message: str) -> None:
        _log.debug(message)


STUB_TYPES: dict[str, object] = {"Tensor": Tensor, "TritonError": TritonError, "InferenceResponse": InferenceResponse,
                                 "InferenceRequest": InferenceRequest, "Logger": Logger}
