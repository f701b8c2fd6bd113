"""A model file a step is given: bytes, a path, an in-memory model, or a function producing one of
these when a build first needs it (e.g. to export weights at build time)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from conch.ensembles.layout import FileSource
from conch.errors import BuildError

RELATIVE_HINT = (" (a relative path is read from the folder conch runs in; build it from the ensemble file's own "
                 "folder, e.g. Path(__file__).parent / 'model.onnx', to build from anywhere)")

# Turns an in-memory model (a torch ScriptModule, a TF GraphDef) into deterministic bytes;
# returns None for objects it does not know.
Serializer = Callable[[Any], bytes | None]


class Artifact:
    """One model file of a step, resolved once on first use and then kept.

    Args:
        source: bytes, a path, an object ``serialize`` accepts, or a function returning one of these.
        what: how messages name the owner, e.g. ``"pytorch step 'resnet'"``.
        filename: the file's name in the model folder, e.g. ``model.pt``.
        serialize: turns in-memory models into bytes (tried before treating ``source`` as a function,
            since models are often callable themselves).
    """

    def __init__(self, source: Any, *, what: str, filename: str, serialize: Serializer | None = None) -> None:
        self._source = source
        self.what = what
        self.filename = filename
        self._serialize = serialize
        self._resolved: FileSource | None = None

    @property
    def deferred(self) -> bool:
        """True when the file only exists once a function produces it (so nothing can be read now)."""
        if self._resolved is not None:
            return False
        converted = self._convert(self._source)
        if converted is not None:
            self._resolved = converted
            return False
        return callable(self._source)

    def resolve(self) -> FileSource:
        """The file as bytes or a path on disk, producing it on first use."""
        if self._resolved is None:
            value = self._source
            converted = self._convert(value)
            if converted is None and callable(value):
                try:
                    value = value()
                except Exception as exc:
                    raise BuildError(
                        f"{self.what}: the function producing {self.filename} failed: {type(exc).__name__}: {exc}"
                    ) from exc
                converted = self._convert(value)
            if converted is None:
                raise BuildError(
                    f"{self.what}: {self.filename} must be given as bytes, a file path, or a function returning "
                    f"one of these; got {type(value).__name__}"
                )
            self._resolved = converted
        return self._resolved

    def data(self) -> bytes:
        """The file's bytes."""
        source = self.resolve()
        return source if isinstance(source, bytes) else source.read_bytes()

    def describe(self) -> str:
        """Where the file comes from, for messages."""
        source = self.resolve()
        return str(source) if isinstance(source, Path) else self.filename

    def _convert(self, value: Any) -> FileSource | None:
        if isinstance(value, bytes | bytearray | memoryview):
            return bytes(value)
        if isinstance(value, str | Path):
            path = Path(value)
            if not path.is_file():
                raise BuildError(f"{self.what}: {self.filename} file {path} does not exist; fix the path"
                                 f"{RELATIVE_HINT if not path.is_absolute() else ''}")
            return path.absolute()  # the same file whichever folder a later reader runs in
        if self._serialize is not None and not isinstance(value, type):
            return self._serialize(value)
        return None
