"""conch: declare Triton ensembles in Python, build MME-ready tarballs, replay them on a real Triton.

The public names load on first use (PEP 562): ``import conch`` alone is cheap, which is what lets
``conch build`` answer an unchanged rebuild without importing numpy or the declaration layer. The first
public name asked for loads them all, the executor with them."""

# ruff: noqa: F401 - _public() and _stamping() return the names they import, through locals()
from typing import TYPE_CHECKING, Any

from conch.version import __version__ as __version__

if TYPE_CHECKING:
    from conch.api import BuildReport, LocalEndpoint, ReplayResult, build, replay, serve
    from conch.backends.dali import DaliStep
    from conch.backends.onnx import OnnxStep
    from conch.backends.python import PythonModelStep, PythonStep
    from conch.backends.pytorch import TorchScriptStep
    from conch.backends.tensorflow import TensorFlowStep
    from conch.backends.tensorrt import TensorRTStep
    from conch.builder.stamping import Stamped, stamp_archive
    from conch.endpoint.protocol import EndpointError, ModelError, ModelNotReady, ValidationError
    from conch.ensembles.config import DynamicBatching, InstanceGroup, InstanceKind, VersionPolicy, Warmup
    from conch.ensembles.dtypes import DType
    from conch.ensembles.ensemble import Ensemble, TensorHandle
    from conch.ensembles.environment import PythonEnv
    from conch.ensembles.samples import Exact, Tolerance, TopK
    from conch.ensembles.target import DEFAULT_RELEASE, Release, Target
    from conch.ensembles.tensors import Tensor
    from conch.errors import (
        ArchiveError,
        BenchError,
        BuildError,
        ConchError,
        ConfigParseError,
        DeclarationError,
        DependencyError,
        DeployError,
        GraphvizMissing,
        InvokeError,
        MatplotlibMissing,
        PackError,
        RunError,
        ServeError,
        ServerExited,
    )
    from conch.executor import Executor, RunResult, run


def _public() -> dict[str, Any]:
    """Every public name but the stamping ones, imported."""
    from conch.api import BuildReport, LocalEndpoint, ReplayResult, build, replay, serve
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
        ArchiveError,
        BenchError,
        BuildError,
        ConchError,
        ConfigParseError,
        DeclarationError,
        DependencyError,
        DeployError,
        GraphvizMissing,
        InvokeError,
        MatplotlibMissing,
        PackError,
        RunError,
        ServeError,
        ServerExited,
    )
    from conch.executor import Executor, RunResult, run

    return dict(locals())  # the names just imported


def _stamping() -> dict[str, Any]:
    """The names whose module loads Triton's config proto: only when asked for."""
    from conch.builder.stamping import Stamped, stamp_archive

    return dict(locals())


def _endpoint_errors() -> dict[str, Any]:
    """The local MME's errors (each carries the HTTP answer SageMaker gives, through Starlette): only when asked
    for."""
    from conch.endpoint.protocol import EndpointError, ModelError, ModelNotReady, ValidationError

    return dict(locals())


_ENDPOINT_ERRORS = ("EndpointError", "ModelError", "ModelNotReady", "ValidationError")


def __getattr__(name: str) -> Any:
    """A public name, its modules imported on first use (then kept as ordinary attributes of the package)."""
    if name not in __all__:
        raise AttributeError(f"module 'conch' has no attribute {name!r}")
    names = (_stamping() if name in ("Stamped", "stamp_archive") else _endpoint_errors()
             if name in _ENDPOINT_ERRORS else _public())
    globals().update(names)
    return names[name]


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})  # a name loaded is in both: listed once


__all__ = [
    "DEFAULT_RELEASE",
    "ArchiveError",
    "BenchError",
    "BuildError",
    "BuildReport",
    "ConchError",
    "ConfigParseError",
    "DType",
    "DaliStep",
    "DeclarationError",
    "DependencyError",
    "DeployError",
    "DynamicBatching",
    "EndpointError",
    "Ensemble",
    "Exact",
    "Executor",
    "GraphvizMissing",
    "InstanceGroup",
    "InstanceKind",
    "InvokeError",
    "LocalEndpoint",
    "MatplotlibMissing",
    "ModelError",
    "ModelNotReady",
    "OnnxStep",
    "PackError",
    "PythonEnv",
    "PythonModelStep",
    "PythonStep",
    "Release",
    "ReplayResult",
    "RunError",
    "RunResult",
    "ServeError",
    "ServerExited",
    "Stamped",
    "Target",
    "Tensor",
    "TensorFlowStep",
    "TensorHandle",
    "TensorRTStep",
    "Tolerance",
    "TopK",
    "TorchScriptStep",
    "ValidationError",
    "VersionPolicy",
    "Warmup",
    "build",
    "replay",
    "run",
    "serve",
    "stamp_archive",
]
