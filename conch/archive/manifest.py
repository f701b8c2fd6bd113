"""The manifest conch writes at the archive root, where Triton and SageMaker ignore it: a typed ``Manifest``,
its one writer (:func:`dumps`) and its one reader (:func:`read_manifest`, an archive or an unpacked folder)."""

from __future__ import annotations

import hashlib
import json
import re
import tarfile
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from conch.cache import file_sha256
from conch.ensembles.layout import FileSource
from conch.ensembles.samples import OutputCheck, check_from_json, check_to_json, decode_array
from conch.ensembles.tensors import Tensor
from conch.errors import ArchiveError

MANIFEST_NAME = "conch-manifest.json"
# a model folder name Triton can start a Python stub under (it goes through a shell)
SHELL_SAFE = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_.-]*")
# 2: one check per expected output (``checks``); 1 (one tolerance per sample) is no longer read.
FORMAT = 2


def sha256(source: FileSource) -> str:
    return hashlib.sha256(source).hexdigest() if isinstance(source, bytes) else file_sha256(source)


@dataclass(frozen=True)
class TensorRecord:
    """One ensemble input or output: ``dims`` as declared, ``shape`` with the batch dimension when it batches."""

    name: str
    datatype: str
    dims: tuple[int, ...]
    shape: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "datatype": self.datatype, "dims": list(self.dims), "shape": list(self.shape)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TensorRecord:
        return cls(str(data["name"]), str(data["datatype"]), tuple(data["dims"]), tuple(data["shape"]))

    @classmethod
    def of(cls, tensor: Tensor, batching: bool) -> TensorRecord:
        """An ensemble tensor as declared (``shape`` leads with -1 when the ensemble batches)."""
        dims = tuple(tensor.dims)
        return cls(tensor.name, tensor.dtype.wire, dims, ((-1,) if batching else ()) + dims)


@dataclass(frozen=True)
class Schema:
    max_batch_size: int
    inputs: tuple[TensorRecord, ...]
    outputs: tuple[TensorRecord, ...]

    def tensors(self) -> list[tuple[str, str, str]]:
        """(input or output, name, KServe datatype) of each tensor a request or response body carries."""
        return ([("input", t.name, t.datatype) for t in self.inputs]
                + [("output", t.name, t.datatype) for t in self.outputs])

    def to_json(self) -> dict[str, Any]:
        return {"max_batch_size": self.max_batch_size, "inputs": [t.to_json() for t in self.inputs],
                "outputs": [t.to_json() for t in self.outputs]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Schema:
        return cls(int(data["max_batch_size"]), tuple(map(TensorRecord.from_json, data["inputs"])),
                   tuple(map(TensorRecord.from_json, data["outputs"])))

    @classmethod
    def of(cls, max_batch_size: int, inputs: tuple[Tensor, ...], outputs: tuple[Tensor, ...]) -> Schema:
        """The I/O schema of an ensemble with these inputs and outputs."""
        batching = max_batch_size > 0
        return cls(max_batch_size, tuple(TensorRecord.of(t, batching) for t in inputs),
                   tuple(TensorRecord.of(t, batching) for t in outputs))


@dataclass(frozen=True)
class StepRecord:
    """One step's model: its name in the archive, what serves it, and the step's own summary (``described``:
    name, kind, max_batch_size, inputs, outputs and what its backend adds)."""

    model_name: str
    served_as: str
    described: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {**self.described, "model_name": self.model_name, "served_as": self.served_as}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StepRecord:
        rest = {k: v for k, v in data.items() if k not in ("model_name", "served_as")}
        return cls(str(data["model_name"]), str(data["served_as"]), rest)


@dataclass(frozen=True)
class EnvironmentRecord:
    """A packed Python environment in the archive (keyed by its path there)."""

    python: str
    source: str
    pins: tuple[str, ...]
    key: str
    unpacked: bool

    def to_json(self) -> dict[str, Any]:
        return {"python": self.python, "source": self.source, "pins": list(self.pins), "key": self.key,
                "unpacked": self.unpacked}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EnvironmentRecord:
        return cls(str(data["python"]), str(data["source"]), tuple(data["pins"]), str(data["key"]),
                   bool(data["unpacked"]))


@dataclass(frozen=True)
class WarmupRecord:
    """The derived warmup: where it came from, and per model its batch size, count and input files."""

    source: str
    steps: Mapping[str, Mapping[str, Any]]

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "steps": dict(self.steps)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> WarmupRecord:
        return cls(str(data["source"]), dict(data["steps"]))


@dataclass(frozen=True)
class ShmRecord:
    """Shared memory the Python-backend models need (see conch.builder.shm_sizing): per model its batch, bytes per
    batch and instances; the server settings that hold them; tensors no sample measured."""

    need_bytes: int
    default_byte_size: int
    growth_byte_size: int
    instances_bytes: int
    steps: Mapping[str, Mapping[str, int]]
    unknown: tuple[str, ...] = ()
    unmeasured: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"need_bytes": self.need_bytes, "default_byte_size": self.default_byte_size,
                "growth_byte_size": self.growth_byte_size, "instances_bytes": self.instances_bytes,
                "steps": dict(self.steps), "unknown": list(self.unknown), "unmeasured": self.unmeasured}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ShmRecord:
        return cls(int(data["need_bytes"]), int(data["default_byte_size"]), int(data["growth_byte_size"]),
                   int(data.get("instances_bytes", 0)), dict(data.get("steps", {})), tuple(data.get("unknown", ())),
                   data.get("unmeasured"))


@dataclass(frozen=True)
class SampleRecord:
    """A sample payload as the archive carries it: inputs and expected outputs in conch's exact JSON
    encoding (conch.ensembles.samples.encode_array), and how each expected output is compared."""

    name: str
    inputs: Mapping[str, Mapping[str, Any]]
    expected: Mapping[str, Mapping[str, Any]]
    checks: Mapping[str, OutputCheck]

    def input_arrays(self) -> dict[str, np.ndarray]:
        return {k: decode_array(v) for k, v in self.inputs.items()}

    def expected_arrays(self) -> dict[str, np.ndarray]:
        return {k: decode_array(v) for k, v in self.expected.items()}

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "inputs": dict(self.inputs), "expected": dict(self.expected),
                "checks": {k: check_to_json(c) for k, c in sorted(self.checks.items())}}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SampleRecord:
        checks = {k: check_from_json(v) for k, v in data["checks"].items()}
        return cls(str(data["name"]), dict(data["inputs"]), dict(data["expected"]), checks)


def _folder_name(name: object) -> str:
    text = str(name)
    if not SHELL_SAFE.fullmatch(text) or text in (".", ".."):
        raise ValueError(f"stamped step name {text!r} is not a model folder name")
    return text


@dataclass(frozen=True)
class StampRecord:
    """The stamp an archive was given (conch.builder.stamping): the TargetModel it was stamped for, and each step's
    original model name with the name it has in this archive."""

    target_model: str
    steps: Mapping[str, str]  # original step model name -> its name in this archive

    def to_json(self) -> dict[str, Any]:
        return {"target_model": self.target_model, "steps": dict(self.steps)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StampRecord:
        """Refuses (ValueError) a step name that is not a model folder's: stamping again makes folders of them."""
        return cls(str(data["target_model"]), {_folder_name(k): _folder_name(v) for k, v in data["steps"].items()})

    @property
    def originals(self) -> dict[str, str]:
        """{name in this archive: original name}."""
        return {v: k for k, v in self.steps.items()}


@dataclass(frozen=True)
class Manifest:
    """What conch records about an archive: how it was built, its I/O, its steps, environments, file digests,
    derived warmup, shared-memory needs and the sample payloads it replays."""

    ensemble: str
    target: str
    release: str
    stub_python: str
    schema: Schema
    steps: tuple[StepRecord, ...]
    samples: tuple[SampleRecord, ...] = ()
    description: str = ""
    conch_version: str = ""
    notes: tuple[str, ...] = ()
    environments: Mapping[str, EnvironmentRecord] = field(default_factory=dict)
    files: Mapping[str, str] = field(default_factory=dict)
    warmup: WarmupRecord | None = None
    shm: ShmRecord | None = None
    format: int = FORMAT
    stamp: StampRecord | None = None  # written only when stamped: unstamped manifests keep their bytes

    def sample(self, name: str) -> SampleRecord | None:
        return next((s for s in self.samples if s.name == name), None)

    def to_json(self) -> dict[str, Any]:
        stamp = {"stamp": self.stamp.to_json()} if self.stamp else {}
        return {
            **stamp,
            "format": self.format,
            "conch_version": self.conch_version,
            "ensemble": self.ensemble,
            "description": self.description,
            "target": self.target,
            "release": self.release,
            "stub_python": self.stub_python,
            "schema": self.schema.to_json(),
            "steps": [s.to_json() for s in self.steps],
            "notes": list(self.notes),
            "environments": {k: e.to_json() for k, e in self.environments.items()},
            "files": dict(self.files),
            "warmup": self.warmup.to_json() if self.warmup else None,
            "shm": self.shm.to_json() if self.shm else None,
            "samples": [s.to_json() for s in self.samples],
        }

    @classmethod
    def from_json(cls, data: Any) -> Manifest:
        """The manifest from its JSON form; KeyError, TypeError or ValueError when it is not one (format 1,
        one tolerance per sample, was never released: it lacks ``checks``)."""
        if not isinstance(data, Mapping):
            raise TypeError(f"a JSON object was expected, not {type(data).__name__}")
        version = int(data.get("format", 1))
        if version > FORMAT:
            raise _TooNew(version)
        return cls(
            ensemble=str(data["ensemble"]),
            target=str(data["target"]),
            release=str(data["release"]),
            stub_python=str(data.get("stub_python", "")),
            schema=Schema.from_json(data["schema"]),
            steps=tuple(map(StepRecord.from_json, data["steps"])),
            samples=tuple(map(SampleRecord.from_json, data["samples"])),
            description=str(data.get("description") or ""),
            conch_version=str(data.get("conch_version", "")),
            notes=tuple(data.get("notes", ())),
            environments={k: EnvironmentRecord.from_json(v) for k, v in (data.get("environments") or {}).items()},
            files=dict(data.get("files") or {}),
            warmup=WarmupRecord.from_json(data["warmup"]) if data.get("warmup") else None,
            shm=ShmRecord.from_json(data["shm"]) if data.get("shm") else None,
            format=version,
            stamp=StampRecord.from_json(data["stamp"]) if data.get("stamp") else None,
        )


class _TooNew(ValueError):
    def __init__(self, version: int) -> None:
        super().__init__(version)
        self.version = version


def dumps(manifest: Manifest | Mapping[str, Any]) -> bytes:
    """The one writer: stable JSON (sorted keys, one space per level, no timestamps, trailing newline)."""
    data = manifest.to_json() if isinstance(manifest, Manifest) else manifest
    return (json.dumps(data, sort_keys=True, indent=1) + "\n").encode()


def read_manifest(path: Path) -> Manifest:
    """The one reader: the manifest of a built archive (read in one streaming pass that stops at it, so a
    large archive is not inflated for it) or of an unpacked archive folder. ArchiveError naming ``path``
    when there is none, it is unreadable, or a newer conch wrote it."""
    path = Path(path)
    if path.is_dir():
        file = path / MANIFEST_NAME
        if not file.is_file():
            raise no_manifest(path)
        return parse_manifest(file.read_bytes(), path)
    if not path.is_file():
        raise ArchiveError(f"{path}: no such archive; give the path of a .tar.gz built by `conch build`")
    try:
        with tarfile.open(path, "r|*") as tar:
            for member in tar:
                if member.name.removeprefix("./") == MANIFEST_NAME and member.isreg():
                    data = tar.extractfile(member)
                    return parse_manifest(data.read() if data is not None else b"", path)
    except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
        raise unreadable(path, exc) from None
    raise no_manifest(path)


def parse_manifest(content: bytes, where: Path | str) -> Manifest:
    """A manifest from its bytes; ArchiveError naming ``where`` (the archive or folder) when it is not one."""
    try:
        data = json.loads(content)
    except ValueError as exc:
        raise ArchiveError(f"{where}: its {MANIFEST_NAME} is not JSON ({exc}); rebuild it with `conch build`"
                           ) from None
    try:
        return Manifest.from_json(data)
    except _TooNew as exc:
        raise ArchiveError(f"{where}: its {MANIFEST_NAME} has format {exc.version}, newer than this conch reads "
                           f"(up to {FORMAT}); upgrade conch, or rebuild the archive with this one") from None
    except KeyError as exc:
        raise ArchiveError(f"{where}: its manifest lacks {exc} or has it in another form; rebuild the archive "
                           "with `conch build`") from None
    except (TypeError, ValueError, AttributeError, IndexError) as exc:
        raise ArchiveError(f"{where}: its manifest is not one conch wrote ({exc}); rebuild the archive with "
                           "`conch build`") from None


def unreadable(archive: Path, exc: BaseException) -> ArchiveError:
    """The error for an archive that does not read as a .tar.gz to its end."""
    return ArchiveError(f"{archive} is not a readable .tar.gz ({exc}); it may be truncated or corrupt: rebuild it "
                        "with `conch build` or copy it again")


def no_manifest(where: Path) -> ArchiveError:
    return ArchiveError(f"{where} has no {MANIFEST_NAME} (not built by conch?); `conch check` checks any archive, "
                        "this needs one built by `conch build`")
