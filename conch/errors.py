"""conch's exceptions: one root, one subclass per stage, so callers can catch by stage."""

from __future__ import annotations


class ConchError(Exception):
    """Root of every error conch raises for a user's mistake or an environment problem. Raise a stage's
    subclass, never this one; a caller that knows more of where it happened adds that with ``within``."""

    def __init__(self, message: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.context: list[str] = []

    def within(self, where: str) -> ConchError:
        """Name the place the error happened in (an ensemble, a file): it leads the message, outermost
        first. Returns the error itself, so the original class and traceback are kept."""
        self.context.insert(0, where)
        return self

    def __str__(self) -> str:
        return ": ".join([*self.context, self.message])


class DeclarationError(ConchError):
    """An ensemble declaration is wrong (names, dtypes, dims, wiring)."""


class BuildError(ConchError):
    """A declared ensemble could not be turned into a repository or tarball."""


class ArchiveError(BuildError):
    """An archive is unsafe, corrupt or not laid out as SageMaker and Triton read it."""


class PackError(ConchError):
    """A Python environment for a Python-backend step could not be packed."""


class ServeError(ConchError):
    """The local Triton server failed to start, load a model, or answer."""


class DeployError(ConchError):
    """A SageMaker or S3 call failed."""


class BenchError(ConchError):
    """A load test, models-per-instance probe or capacity plan cannot run as asked."""


class RunError(ConchError):
    """Running an ensemble in-process failed, or a step produced what its declaration does not say."""


class DependencyError(ConchError):
    """An optional package a command needs is not installed (the message names the extra that brings it)."""
