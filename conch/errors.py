"""conch's exceptions: one root, one subclass per stage, so callers can catch by stage. Each is exported from
``conch`` (``conch.ArchiveError``); the local MME's answers (``EndpointError`` and its subclasses, which carry
the HTTP response SageMaker gives) live with the endpoint and are exported from ``conch`` too. The exit code of
each in the CLI: docs/architecture.md, "Errors"."""

from __future__ import annotations

from pathlib import Path


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


class ConfigParseError(BuildError):
    """A config that is not UTF-8 text or not Triton's ModelConfig text; ``reason`` is the parser's words, for
    callers that report it in their own terms (`conch check`, `conch inspect`)."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class ArchiveError(ConchError):
    """An archive is unsafe, corrupt or not laid out as SageMaker and Triton read it (reading, not building:
    a corrupt archive given to replay, check or serve is an ArchiveError, not a BuildError)."""


class PackError(ConchError):
    """A Python environment for a Python-backend step could not be packed."""


class ServeError(ConchError):
    """The local Triton server failed to start, load a model, or answer."""


class InvokeError(ServeError):
    """The server answered an inference request with an error (``status``: its HTTP status, if it answered)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class DeployError(ConchError):
    """A SageMaker or S3 call failed."""


class BenchError(ConchError):
    """A load test, models-per-instance probe or capacity plan cannot run as asked."""


class RunError(ConchError):
    """Running an ensemble in-process failed, or a step produced what its declaration does not say."""


class DependencyError(ConchError):
    """An optional package a command needs is not installed (the message names the extra that brings it)."""


class GraphvizMissing(DependencyError):
    """SVG or PNG was asked for, and no Graphviz is installed to lay the graph out."""


class MatplotlibMissing(DependencyError):
    """The waterfall PNG was asked for, and matplotlib is not installed."""


class ServerExited(ServeError):
    """tritonserver exited while conch held it: how (``code``, as Popen gives it), while doing what, and where
    its log was kept."""

    def __init__(self, message: str, code: int, log: Path | None) -> None:
        super().__init__(message)
        self.code, self.log = code, log
