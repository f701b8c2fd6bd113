"""conch: declare Triton ensembles in Python, build MME-ready tarballs, replay them on a real Triton."""

import importlib
from typing import TYPE_CHECKING, Any

from conch.backends.dali import DaliStep
from conch.backends.onnx import OnnxStep
from conch.backends.python import PythonModelStep, PythonStep
from conch.backends.pytorch import TorchScriptStep
from conch.backends.tensorflow import TensorFlowStep
from conch.backends.tensorrt import TensorRTStep
from conch.ensembles.config import DynamicBatching, InstanceGroup, InstanceKind, VersionPolicy, Warmup
from conch.ensembles.dtypes import DType
from conch.ensembles.ensemble import Ensemble, TensorHandle
from conch.ensembles.environment import PythonEnv
from conch.ensembles.samples import Exact, Tolerance, TopK
from conch.ensembles.target import DEFAULT_RELEASE, Release, Target
from conch.ensembles.tensors import Tensor
from conch.errors import (
    BuildError,
    ConchError,
    DeclarationError,
    DeployError,
    PackError,
    RunError,
    ServeError,
)
from conch.executor import Executor, RunResult, run
from conch.version import __version__ as __version__

if TYPE_CHECKING:
    from conch.builder.stamping import Stamped, stamp_archive

_LAZY = {"Stamped": "conch.builder.stamping", "stamp_archive": "conch.builder.stamping"}


def __getattr__(name: str) -> Any:
    """Names whose modules load Triton's config proto, imported on first use (the CLI starts without them)."""
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'conch' has no attribute {name!r}")

__all__ = [
    "DEFAULT_RELEASE",
    "BuildError",
    "ConchError",
    "DType",
    "DaliStep",
    "DeclarationError",
    "DeployError",
    "DynamicBatching",
    "Ensemble",
    "Exact",
    "Executor",
    "InstanceGroup",
    "InstanceKind",
    "OnnxStep",
    "PackError",
    "PythonEnv",
    "PythonModelStep",
    "PythonStep",
    "Release",
    "RunError",
    "RunResult",
    "ServeError",
    "Stamped",
    "Target",
    "Tensor",
    "TensorFlowStep",
    "TensorHandle",
    "TensorRTStep",
    "Tolerance",
    "TopK",
    "TorchScriptStep",
    "VersionPolicy",
    "Warmup",
    "run",
    "stamp_archive",
]
