"""Samples from a folder of request bodies, as teams keep them from production traffic: each request (KServe v2
JSON, or the binary+json body SageMaker passes to Triton) with its expected outputs and their checks beside it;
the requests of one ``--payload`` file (:func:`read_payload_file`, for archives made by hand: no samples); and the
one reader of KServe v2 request bodies (:func:`parse_request`).

The layout (docs/harness.md), one sample per NAME:

- ``NAME.request.json``: a KServe v2 JSON inference request (``{"inputs": [{"name", "shape", "datatype",
  "data"}]}``), or ``NAME.request.bin``: a binary+json request (its JSON header, then the raw tensors);
- ``NAME.expected.json``: ``{"outputs": {OUTPUT: tensor}, "checks": {OUTPUT: check}}``, each tensor as KServe
  writes it (``datatype``, ``shape``, ``data``) or in conch's exact encoding (``b64``/``items``, what
  ``conch.ensembles.samples.encode_array`` writes), each check as ``{"kind": "tolerance", "atol": ...}``,
  ``{"kind": "top_k", "k": 5}`` or ``{"kind": "exact"}`` (an output without one gets ``Tolerance()``); optional
  ``"sample"`` (the sample's name when it is not NAME), ``"request_content_type"`` (a ``.bin`` request's
  ``...;json-header-size=N``: without it the JSON header's end is found by parsing it), ``"recorded": true``
  and ``"note"`` (outputs a run answered, written by ``conch replay --record``: not outputs anyone trusted).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from conch.ensembles.dtypes import DType
from conch.ensembles.samples import OutputCheck, Tolerance, check_from_json, decode_array, read_samples
from conch.errors import ConchError, DeclarationError, ServeError

if TYPE_CHECKING:
    from conch.ensembles.ensemble import Ensemble

REQUEST_JSON = ".request.json"
REQUEST_BINARY = ".request.bin"
EXPECTED = ".expected.json"
HEADER_SIZE = "json-header-size="
LAYOUT_HINT = ("each sample is NAME.request.json (or NAME.request.bin) with NAME.expected.json beside it "
               "(docs/harness.md)")


@dataclass(frozen=True)
class Payload:
    """One request replayed in place of an archive's own samples: read from a payload folder, or from one
    ``--payload`` file (:func:`read_payload_file`): its inputs, expected outputs (none for a bare request) and
    their checks."""

    name: str
    inputs: dict[str, np.ndarray]
    expected: dict[str, np.ndarray] = field(default_factory=dict)
    checks: Mapping[str, OutputCheck] = field(default_factory=dict)
    recorded: bool = False  # outputs a run answered (``conch replay --record``), not outputs anyone checked
    request: Path | None = None  # the file the request was read from

    def input_arrays(self) -> dict[str, np.ndarray]:
        return self.inputs

    def expected_arrays(self) -> dict[str, np.ndarray]:
        return self.expected


def read_payloads(folder: Path | str) -> list[Payload]:
    """Every sample of a payload folder, in file-name order; DeclarationError naming the file and the fix for a
    request without its expected outputs (or the other way round), or a body conch cannot read."""
    folder = Path(folder)
    if not folder.is_dir():
        raise DeclarationError(f"{folder}: no such payload folder; {LAYOUT_HINT}")
    requests: dict[str, Path] = {}
    for path in sorted(folder.iterdir()):
        for suffix in (REQUEST_JSON, REQUEST_BINARY):
            if path.name.endswith(suffix):
                stem = path.name.removesuffix(suffix)
                if stem in requests:
                    raise DeclarationError(f"{folder}: sample {stem!r} has both {stem}{REQUEST_JSON} and "
                                           f"{stem}{REQUEST_BINARY}; keep one")
                requests[stem] = path
    expected = {p.name.removesuffix(EXPECTED): p for p in folder.glob(f"*{EXPECTED}")}
    orphans = sorted(set(expected) - set(requests))
    if orphans:
        raise DeclarationError(f"{expected[orphans[0]]}: no request beside it ({orphans[0]}{REQUEST_JSON} or "
                               f"{orphans[0]}{REQUEST_BINARY}); {LAYOUT_HINT}")
    if not requests:
        raise DeclarationError(f"{folder}: no payloads in it; {LAYOUT_HINT}")
    return [_payload(stem, request, expected.get(stem)) for stem, request in sorted(requests.items())]


def payloads_of(root: Path, target_model: str) -> list[Payload]:
    """The payloads of one archive in a payload folder (``--payloads``, ``--record``): ``root/<archive>/`` (its
    TargetModel without ``.tar.gz``) when that exists, else ``root`` itself."""
    own = root / target_model.removesuffix(".tar.gz")
    return read_payloads(own if own.is_dir() else root)


def read_payload_file(path: Path) -> list[Payload]:
    """The requests of a ``--payload`` file: one KServe v2 JSON request (nothing expected: every endpoint must
    answer with the served model's outputs, alike), or the samples file `conch import` writes (inputs and
    expected outputs)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ServeError(f"--payload {path}: cannot read it ({exc.strerror or exc})") from None
    if _is_samples_file(data):
        try:
            return [Payload(name, inputs, expected, checks, request=path)
                    for name, inputs, expected, checks in read_samples(path)]
        except ConchError as exc:
            raise ServeError(f"--payload {exc}") from None
    try:
        return [Payload(path.name, parse_request(data), request=path)]
    except (ValueError, ConchError) as exc:
        raise ServeError(f"--payload {path}: not a KServe v2 JSON request ({exc}); write "
                         '{"inputs": [{"name": ..., "shape": [...], "datatype": ..., "data": [...]}]}, or give the '
                         "samples file `conch import` writes") from None


def _is_samples_file(data: bytes) -> bool:
    """Whether a ``--payload`` file is the samples file `conch import` writes: a JSON object with ``"samples"``
    and no ``"inputs"`` (a KServe request with an input named ``samples`` has ``"inputs"``)."""
    try:
        top = json.loads(data)
    except ValueError:  # a binary+json request: its JSON header, then raw bytes
        return False
    return isinstance(top, dict) and "samples" in top and "inputs" not in top


def add_samples(ensemble: Ensemble, folder: Path | str) -> None:
    """Declare every sample of a payload folder on ``ensemble`` (``ensemble.sample`` checks each against the
    declared inputs and outputs)."""
    for p in read_payloads(folder):
        ensemble.sample(p.name, p.inputs, p.expected, dict(p.checks))


def _payload(stem: str, request: Path, expected_path: Path | None) -> Payload:
    if expected_path is None:
        raise DeclarationError(f"{request}: no {stem}{EXPECTED} beside it, so nothing to compare the answer with; "
                               "write the expected outputs there (or record them: `conch replay --record DIR`)")
    meta = _json_object(expected_path)
    outputs, checks = meta.get("outputs"), meta.get("checks", {})
    if not isinstance(outputs, dict) or not outputs:
        raise DeclarationError(f"{expected_path}: no \"outputs\": give the expected value of at least one output "
                               "(an object output name -> {\"datatype\", \"shape\", \"data\"})")
    if not isinstance(checks, dict) or set(checks) - set(outputs):
        raise DeclarationError(f"{expected_path}: \"checks\" must map outputs of \"outputs\" to checks, got "
                               f"{sorted(checks) if isinstance(checks, dict) else checks!r}")
    try:
        expected = {name: decode_tensor(value) for name, value in outputs.items()}
        parsed = {name: check_from_json(value) for name, value in checks.items()}
    except (ValueError, KeyError, TypeError) as exc:
        raise DeclarationError(f"{expected_path}: {exc}; tensors are {{\"datatype\", \"shape\", \"data\"}}, checks "
                               "{\"kind\": \"tolerance\"|\"top_k\"|\"exact\", ...}") from None
    body = request.read_bytes()
    content_type = meta.get("request_content_type") if request.name.endswith(REQUEST_BINARY) else None
    try:
        inputs = parse_request(body, content_type if isinstance(content_type, str) else None)
    except (ValueError, KeyError, TypeError) as exc:
        kind = "binary+json" if request.name.endswith(REQUEST_BINARY) else "KServe v2 JSON"
        raise DeclarationError(f"{request}: not a {kind} inference request conch can read ({exc})") from None
    name = meta.get("sample", stem)
    return Payload(str(name), inputs, expected, {o: parsed.get(o, Tolerance()) for o in expected},
                   bool(meta.get("recorded", False)), request)


def _json_object(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DeclarationError(f"{path}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise DeclarationError(f"{path}: expected a JSON object with \"outputs\" and \"checks\"")
    return data


def check_json_request(body: bytes) -> bytes:
    """``body`` if it is a KServe v2 JSON request (an object with ``inputs``); ValueError saying why not."""
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("inputs"), list):
        raise ValueError("no 'inputs' list")
    return body


def decode_tensor(data: Mapping[str, Any]) -> np.ndarray:
    """A tensor as KServe v2 JSON writes it (``datatype``, ``shape``, ``data``; BYTES as strings) or in conch's
    exact encoding (``b64`` or ``items``)."""
    if "b64" in data or "items" in data:
        return decode_array(data)
    dtype = DType.of(str(data["datatype"]))
    values = data["data"]
    shape = [int(d) for d in data["shape"]]
    if dtype is DType.BYTES:
        flat = np.array([v.encode() if isinstance(v, str) else bytes(v) for v in np.ravel(values)], dtype=object)
        return flat.reshape(shape)
    return np.asarray(values, dtype=dtype.numpy).reshape(shape)


def parse_request(body: bytes, content_type: str | None = None) -> dict[str, np.ndarray]:
    """The input tensors of a KServe v2 JSON request, or of a binary+json one (its JSON header's length from
    ``content_type``'s ``json-header-size=N``, or found by parsing the header); ValueError saying why it is not
    one."""
    header_size = _header_size(body, content_type)
    header = json.loads(check_json_request(body[:header_size]))
    binary = memoryview(body)[header_size:]
    inputs: dict[str, np.ndarray] = {}
    offset = 0
    try:
        for item in header["inputs"]:
            size = (item.get("parameters") or {}).get("binary_data_size")
            if size is None:
                inputs[str(item["name"])] = decode_tensor(item)
                continue
            raw = bytes(binary[offset:offset + int(size)])
            if len(raw) != int(size):
                raise ValueError(f"input {item['name']!r}: binary_data_size {size} runs past the end of the body")
            offset += int(size)
            inputs[str(item["name"])] = _binary_tensor(item, raw)
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"an input lacks name, datatype, shape or data ({type(exc).__name__}: {exc})") from None
    if offset != len(binary) and (offset or bytes(binary).strip()):  # white space may end a JSON body
        raise ValueError(f"{len(binary) - offset} bytes after the last input's binary data")
    return inputs


def _header_size(body: bytes, content_type: str | None) -> int:
    if content_type and HEADER_SIZE in content_type:
        return int(content_type.split(HEADER_SIZE, 1)[1].split(";", 1)[0])
    # latin-1 maps each byte to one character, so the end of the first JSON value is its length in bytes
    _, end = json.JSONDecoder().raw_decode(body.decode("latin-1"))
    return end


def _binary_tensor(item: Mapping[str, Any], raw: bytes) -> np.ndarray:
    from tritonclient.utils import deserialize_bytes_tensor

    dtype = DType.of(str(item["datatype"]))
    shape = [int(d) for d in item["shape"]]
    if dtype is DType.BYTES:
        return np.asarray(deserialize_bytes_tensor(raw), dtype=object).reshape(shape)
    return np.frombuffer(raw, dtype=dtype.numpy.newbyteorder("<")).astype(dtype.numpy).reshape(shape)
