"""What a build targets: the Triton release (which fixes the stub's Python, the backends that exist and
the SageMaker image tag, see conch.sagemaker.images) and whether it lays out production backends or local
CPU stand-ins."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from conch.errors import BuildError

# 24.10 is Triton 2.51, the server the nvidia-pytriton wheel carries: production builds target exactly
# the release that `conch replay` proves them on.
DEFAULT_RELEASE = "24.10"


class Target(enum.Enum):
    """``production`` lays out the real backends; ``local`` swaps in CPU stand-ins for the local server."""

    PRODUCTION = "production"
    LOCAL = "local"

    @classmethod
    def of(cls, value: Target | str) -> Target:
        if isinstance(value, Target):
            return value
        try:
            return cls(value)
        except ValueError:
            raise BuildError(f"unknown target {value!r}: use 'production' or 'local'") from None


@dataclass(frozen=True, order=True)
class Release:
    """A Triton container release ``YY.MM`` (e.g. 24.10)."""

    year: int
    month: int

    @classmethod
    def of(cls, value: Release | str) -> Release:
        if isinstance(value, Release):
            return value
        match = re.fullmatch(r"(\d{2})\.(\d{2})", str(value).strip())
        if not match or not 1 <= int(match.group(2)) <= 12:
            raise BuildError(f"release {value!r}: write it as YY.MM, e.g. {DEFAULT_RELEASE}")
        release = cls(int(match.group(1)), int(match.group(2)))
        if release < Release(23, 2):
            raise BuildError(
                f"release {value}: conch targets 23.02 and later (SageMaker MME ensembles and "
                "EXECUTION_ENV_PATH handling before that differ)"
            )
        return release

    def __str__(self) -> str:
        return f"{self.year:02d}.{self.month:02d}"

    @property
    def stub_python(self) -> str:
        """The Python minor version of the Python-backend stub in this release's container."""
        if self < Release(23, 5):
            return "3.8"
        if self < Release(24, 11):
            return "3.10"
        return "3.12"

    @property
    def has_tensorflow(self) -> bool:
        """The TensorFlow backend left the containers with 25.03."""
        return self < Release(25, 3)

    @property
    def env_dirs_supported(self) -> bool:
        """EXECUTION_ENV_PATH may name an unpacked folder from 23.07 on."""
        return not self < Release(23, 7)
