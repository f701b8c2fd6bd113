"""What the load generator processes are told: where to send, which TargetModels, which request bodies (the
archives' own manifest samples) and how to check the answers. Plain JSON, so it crosses a pipe or a socket."""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from conch.archive.manifest import read_manifest
from conch.ensembles.dtypes import DType
from conch.ensembles.payloads import Payload
from conch.ensembles.samples import OutputCheck, check_to_json, encode_array
from conch.errors import ArchiveError, BenchError, ServeError
from conch.perf.load.stages import Stage
from conch.wire import COMPONENT_HEADER, TARGET_HEADER, component_name, encode_request, json_refusal

# How requests reach the ensembles: the SageMaker runtime API over plain HTTP (the local MME, or anything
# speaking it), the same API through boto3's sagemaker-runtime client (a deployed endpoint), or KServe v2.
KINDS = ("sagemaker", "boto3", "kserve")


@dataclass
class Request:
    sample: str
    body: str  # base64
    content_type: str
    body_kind: str  # json | binary
    expected: dict[str, Any]  # manifest encoding of the expected outputs
    checks: dict[str, Any]  # output -> how it is compared (conch.ensembles.samples.check_to_json)
    not_applicable: str = ""  # why the body asked for (json) could not be sent, and binary+json went instead


@dataclass
class Target:
    name: str  # TargetModel (SageMaker) or model name (KServe)
    requests: list[Request]


@dataclass
class LoadSpec:
    kind: str
    url: str | None
    targets: list[Target]
    stages: list[Stage]
    endpoint: str = "local"
    region: str = "us-east-1"
    zipf: float = 0.0
    seed: int = 0
    check: bool = True
    wait: float = 0.0
    timeout: float = 120.0
    extra: dict[str, Any] = field(default_factory=dict)
    components: bool = False  # the endpoint hosts inference components: a target's is <endpoint>-<archive stem>

    def duration(self) -> float:
        return self.stages[-1].duration

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LoadSpec:
        data = dict(data)
        data["stages"] = [Stage(**s) for s in data["stages"]]
        data["targets"] = [Target(t["name"], [Request(**r) for r in t["requests"]]) for t in data["targets"]]
        return cls(**data)


def archive_requests(archive: Path, body_kind: str = "binary",
                     payloads: Sequence[Payload] | None = None) -> list[Request]:
    """One request per manifest sample (or per payload, given: ``--payload FILE``, for an archive made by hand).
    With ``json`` bodies, a sample JSON cannot carry (non-UTF-8 bytes, FP16 tensors) goes as binary+json, its
    ``not_applicable`` saying why."""
    samples: list[tuple[str, dict[str, Any], dict[str, Any], Mapping[str, OutputCheck]]]
    if payloads is not None:
        samples = [(p.name, p.inputs, {k: encode_array(v, DType.of(v.dtype)) for k, v in p.expected.items()},
                    p.checks) for p in payloads]
        no_json = ""
    else:
        try:
            manifest = read_manifest(archive)
        except ArchiveError as exc:
            raise BenchError(f"{exc}; give --payload FILE for an archive conch did not build") from None
        if not manifest.samples:
            raise BenchError(f"{archive.name} has no sample payloads to send; declare one with ensemble.sample(...)")
        samples = [(s.name, s.input_arrays(), {k: dict(v) for k, v in s.expected.items()}, s.checks)
                   for s in manifest.samples]
        no_json = (json_refusal(manifest.schema.tensors()) or "") if body_kind == "json" else ""
    requests = []
    for name, inputs, expected, checks in samples:
        kind, why = ("binary", no_json) if no_json else (body_kind, "")
        try:
            body, content_type = encode_request(inputs, kind)
        except ServeError as exc:
            kind, why = "binary", str(exc)
            body, content_type = encode_request(inputs, kind)
        except ValueError as exc:
            raise BenchError(str(exc)) from None
        requests.append(Request(name, base64.b64encode(body).decode(), content_type, kind,
                                expected, {k: check_to_json(c) for k, c in checks.items()}, why))
    return requests


def not_applicable(targets: Sequence[Target]) -> dict[str, str]:
    """{TargetModel: why its JSON bodies went as binary+json} for the targets that could not take JSON."""
    return {t.name: next(r.not_applicable for r in t.requests if r.not_applicable) for t in targets
            if any(r.not_applicable for r in t.requests)}


def archive_targets(archives: Sequence[Path], names: Sequence[str] | None = None,
                    body_kind: str = "binary", payloads: Sequence[Payload] | None = None) -> list[Target]:
    """Targets named by the archives' file names (their TargetModel under an S3 prefix), or by ``names``; each
    sends its samples, or ``payloads`` when given."""
    if not archives:
        raise BenchError("no archives to send requests to: give built .tar.gz files or a folder of them")
    names = list(names) if names is not None else [a.name for a in archives]
    # copies share one read
    requests = {a: archive_requests(a, body_kind, payloads) for a in dict.fromkeys(archives)}
    return [Target(name, requests[archive]) for name, archive in zip(names, archives, strict=True)]


def route_header(spec: LoadSpec, target: str) -> dict[str, str]:
    """The header that routes a call of ``target``: its inference component's, or its TargetModel."""
    if spec.components:
        return {COMPONENT_HEADER: component_name(spec.endpoint, target)}
    return {TARGET_HEADER: target}
