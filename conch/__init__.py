"""conch: declare Triton ensembles in Python, build MME-ready tarballs, replay them on a real Triton."""

__version__ = "0.1.0"

from conch.backends.onnx import OnnxStep  # noqa: E402
from conch.backends.python import PythonStep  # noqa: E402
from conch.ensembles.config import DynamicBatching, InstanceGroup, VersionPolicy, Warmup  # noqa: E402
from conch.ensembles.dtypes import DType  # noqa: E402
from conch.ensembles.ensemble import Ensemble  # noqa: E402
from conch.ensembles.samples import Tolerance  # noqa: E402
from conch.ensembles.target import DEFAULT_RELEASE, Release, Target  # noqa: E402
from conch.ensembles.tensors import Tensor, TensorHandle  # noqa: E402
from conch.errors import (  # noqa: E402
    BuildError,
    ConchError,
    DeclarationError,
    DeployError,
    PackError,
    ReplayMismatch,
    ServeError,
)

__all__ = [
    "DEFAULT_RELEASE",
    "BuildError",
    "ConchError",
    "DType",
    "DeclarationError",
    "DeployError",
    "DynamicBatching",
    "Ensemble",
    "InstanceGroup",
    "OnnxStep",
    "PackError",
    "PythonStep",
    "Release",
    "ReplayMismatch",
    "ServeError",
    "Target",
    "Tensor",
    "TensorHandle",
    "Tolerance",
    "VersionPolicy",
    "Warmup",
]
