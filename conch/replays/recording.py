"""`conch replay --record DIR`: what a replay sent and what the server answered, written as a payload folder
(conch.ensembles.payloads reads it back), one subfolder per archive. The outputs are marked as recorded: they
are what this run answered, not outputs anyone checked, as `conch import` marks the samples it captures."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from conch.ensembles.dtypes import DType
from conch.ensembles.payloads import EXPECTED, REQUEST_BINARY, REQUEST_JSON
from conch.ensembles.samples import OutputCheck, check_to_json, encode_array
from conch.errors import ServeError
from conch.replays.local_replay import LoadedArchive, ReplaySample
from conch.wire import binary_request, json_refusal, json_request, json_tensor

NOTE = ("recorded by `conch replay --record`: these outputs are what the server answered in that run, not outputs "
        "anyone checked; review them (and their checks) before you trust them")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def file_stem(sample: str) -> str:
    """A sample's name as a file name (other characters become ``_``; the name itself goes in the file)."""
    return _UNSAFE.sub("_", sample).strip("._") or "sample"


class Recorder:
    """Keeps the first answer each sample of each archive got, and writes them as payload folders."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.kept: dict[tuple[str, str], tuple[dict[str, np.ndarray], dict[str, np.ndarray],
                                               Mapping[str, OutputCheck]]] = {}

    def heard(self, loaded: LoadedArchive, sample: ReplaySample, endpoint: str,
              outputs: Mapping[str, np.ndarray]) -> None:
        """A replay's listener (``replay_archives(heard=...)``): the first answer of each sample is kept."""
        key = (loaded.name, sample.name)
        if key not in self.kept:
            self.kept[key] = (sample.input_arrays(), dict(outputs), sample.checks)

    def write(self) -> list[Path]:
        """Write every kept sample (request body, expected outputs marked as recorded); the folders written."""
        folders: list[Path] = []
        stems: dict[Path, dict[str, str]] = {}
        for (target_model, sample), (inputs, outputs, checks) in sorted(self.kept.items()):
            folder = self.root / target_model.removesuffix(".tar.gz")  # as payloads_of reads it
            taken = stems.setdefault(folder, {})
            stem = file_stem(sample)
            if taken.get(stem, sample) != sample:
                stem = f"{stem}_{len(taken)}"
            taken[stem] = sample
            write_payload(folder, stem, sample, inputs, outputs, checks)
            if folder not in folders:
                folders.append(folder)
        return folders


def write_payload(folder: Path, stem: str, sample: str, inputs: Mapping[str, np.ndarray],
                  outputs: Mapping[str, np.ndarray], checks: Mapping[str, OutputCheck]) -> None:
    """One sample as ``stem.request.json`` (``.bin`` when JSON cannot carry its inputs) and
    ``stem.expected.json``, each written atomically."""
    from conch.atomic_write import write_bytes_atomic

    meta: dict[str, Any] = {"sample": sample, "recorded": True, "note": NOTE}
    meta["outputs"] = {k: _tensor(v) for k, v in sorted(outputs.items())}  # before any file: none is left half
    meta["checks"] = {k: check_to_json(c) for k, c in sorted(checks.items()) if k in outputs}
    tensors = [("input", k, DType.of(v.dtype).wire) for k, v in inputs.items()]
    binary = bool(json_refusal(tensors)) or not all(_utf8(v) for v in inputs.values())
    body, content_type = binary_request(inputs) if binary else json_request(inputs)
    if binary:
        meta["request_content_type"] = content_type
    folder.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(folder / f"{stem}{REQUEST_BINARY if binary else REQUEST_JSON}", body)
    (folder / f"{stem}{REQUEST_JSON if binary else REQUEST_BINARY}").unlink(missing_ok=True)
    write_bytes_atomic(folder / f"{stem}{EXPECTED}", (json.dumps(meta, indent=1) + "\n").encode())


def _utf8(array: np.ndarray) -> bool:
    if array.dtype != object:
        return True
    try:
        for v in array.ravel():
            if isinstance(v, bytes):
                v.decode()
    except UnicodeDecodeError:
        return False
    return True


def _tensor(array: np.ndarray) -> dict[str, Any]:
    """KServe's JSON form where it holds the values exactly (numbers, UTF-8 strings), else conch's exact one."""
    try:
        dtype = DType.of(array.dtype)
    except Exception as exc:  # a dtype conch has no name for cannot be written back
        raise ServeError(f"cannot record an output of dtype {array.dtype}: {exc}") from None
    try:
        return {k: v for k, v in json_tensor("", array).items() if k != "name"}
    except ServeError:  # bytes that are not UTF-8
        return encode_array(array, dtype)
