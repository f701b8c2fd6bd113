"""What the load generator processes are told: where to send, which TargetModels, which request bodies (the
archives' own manifest samples) and how to check the answers. Plain JSON, so it crosses a pipe or a socket."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from conch.builder.manifest import read_manifest
from conch.ensembles.samples import check_to_json
from conch.errors import ArchiveError, BenchError, ServeError
from conch.harness.load.stages import Stage
from conch.wire import encode_request

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


def archive_requests(archive: Path, body_kind: str = "binary") -> list[Request]:
    """One request per manifest sample; a sample JSON cannot carry (non-UTF-8 bytes) goes as binary+json."""
    try:
        manifest = read_manifest(archive)
    except ArchiveError as exc:
        raise BenchError(str(exc)) from None
    if not manifest.samples:
        raise BenchError(f"{archive.name} has no sample payloads to send; declare one with ensemble.sample(...)")
    requests = []
    for sample in manifest.samples:
        inputs = sample.input_arrays()
        kind = body_kind
        try:
            body, content_type = encode_request(inputs, kind)
        except ServeError:
            kind = "binary"
            body, content_type = encode_request(inputs, kind)
        except ValueError as exc:
            raise BenchError(str(exc)) from None
        requests.append(Request(sample.name, base64.b64encode(body).decode(), content_type, kind,
                                dict(sample.expected), {k: check_to_json(c) for k, c in sample.checks.items()}))
    return requests


def archive_targets(archives: Sequence[Path], names: Sequence[str] | None = None,
                    body_kind: str = "binary") -> list[Target]:
    """Targets named by the archives' file names (their TargetModel under an S3 prefix), or by ``names``."""
    if not archives:
        raise BenchError("no archives to send requests to: give built .tar.gz files or a folder of them")
    names = list(names) if names is not None else [a.name for a in archives]
    requests = {a: archive_requests(a, body_kind) for a in dict.fromkeys(archives)}  # copies share one read
    return [Target(name, requests[archive]) for name, archive in zip(names, archives, strict=True)]
