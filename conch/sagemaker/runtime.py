"""Invoke one archive on a deployed MME (``TargetModel`` = its key under the prefix), with the same KServe v2
JSON and binary+json bodies the local replay sends, and replay an archive's samples against the endpoint."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from conch.archive.manifest import MANIFEST_NAME, Manifest, no_manifest, read_manifest
from conch.aws import AwsTarget, aws_errors, error_code
from conch.ensembles.payloads import check_json_request
from conch.errors import ArchiveError, ConchError, DeployError, ServeError
from conch.verdicts import ReplayReport, ReplayRow, judge, not_applicable
from conch.wire import BODIES, MAX_BODY_BYTES, encode_request, json_refusal, parse_response

READ_TIMEOUT_S = 120.0  # a TargetModel's first call downloads and loads the archive before it answers


def request_body(inputs: Mapping[str, np.ndarray], body: str) -> tuple[bytes, str]:
    """(body, ContentType) for ``inputs`` as a ``json`` or ``binary`` (binary+json) request."""
    try:
        return encode_request(inputs, body)
    except ValueError as exc:
        raise DeployError(str(exc)) from None


def read_json_body(path: Path) -> bytes:
    """A KServe v2 JSON request body from a file, checked; DeployError naming the file and the cause."""
    try:
        return check_json_request(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise DeployError(f"--request {path}: not a KServe v2 request body ({exc}); write {{\"inputs\": [...]}}"
                          ) from None


def invoke_raw(
    aws: AwsTarget, endpoint: str, target_model: str, body: bytes, content_type: str, *, runtime: Any = None,
    component: str | None = None,
) -> tuple[bytes, str]:
    """``invoke_endpoint`` with a ready body; returns the response body and its ContentType. With ``component``
    the call goes to that inference component (``InferenceComponentName``) instead of a TargetModel."""
    from botocore.exceptions import ClientError

    if len(body) > MAX_BODY_BYTES:
        raise DeployError(
            f"the request for {target_model!r} is {len(body) / 1e6:.1f} MB; SageMaker real-time invocations take at "
            f"most {MAX_BODY_BYTES / 1e6:.1f} MB: send fewer rows per request"
        )
    runtime = runtime or aws.client("sagemaker-runtime", read_timeout=READ_TIMEOUT_S)
    route = {"InferenceComponentName": component} if component else {"TargetModel": target_model}
    what = f"inference component {component!r}" if component else repr(target_model)
    with aws_errors(f"invoking {what} on endpoint {endpoint!r}",
                    f"the credentials need sagemaker:InvokeEndpoint on endpoint {endpoint}"):
        try:
            response = runtime.invoke_endpoint(EndpointName=endpoint, ContentType=content_type, Body=body, **route)
        except ClientError as exc:
            if error_code(exc) != "ModelError":
                raise
            raise DeployError(_model_error(exc.response, endpoint, target_model)) from None
    return response["Body"].read(), str(response.get("ContentType", ""))


def invoke(
    aws: AwsTarget, endpoint: str, target_model: str, inputs: Mapping[str, np.ndarray], *, body: str = "json",
    runtime: Any = None, component: str | None = None,
) -> dict[str, np.ndarray]:
    """Send ``inputs`` to ``target_model`` (or the inference component ``component``) on the endpoint and return
    its output tensors."""
    content, content_type = invoke_raw(aws, endpoint, target_model, *request_body(inputs, body), runtime=runtime,
                                       component=component)
    try:
        return parse_response(content, content_type, body)
    except ServeError as exc:
        raise DeployError(f"{target_model!r} on endpoint {endpoint!r}: {exc}") from None


def built_manifest(archive: Path) -> Manifest | None:
    """:func:`archive_manifest`, or None for an archive made by hand (it holds no conch manifest: `conch check`
    judges it from its configs alone, and it is deployed for the release the endpoint runs)."""
    if not archive.is_file():
        raise DeployError(f"{archive}: no such archive")
    try:
        return read_manifest(archive)
    except ArchiveError as exc:
        if str(exc) == str(no_manifest(archive)):
            return None
        raise DeployError(f"{archive}: {exc}") from None


def archive_manifest(archive: Path) -> Manifest:
    """The manifest of a built archive (conch.archive.manifest.read_manifest), as a DeployError if it has none."""
    if not archive.is_file():
        raise DeployError(f"{archive}: no such archive")
    try:
        return read_manifest(archive)
    except ArchiveError as exc:
        raise DeployError(f"{archive}: not an archive with a {MANIFEST_NAME}; build it with `conch build` ({exc})"
                          ) from None


def replay_endpoint(
    aws: AwsTarget,
    endpoint: str,
    archive: Path,
    *,
    bodies: Iterable[str] = BODIES,
    samples: Sequence[str] = (),
    target_model: str | None = None,
    progress: Callable[[str], None] | None = None,
    runtime: Any = None,
    component: str | None = None,
) -> ReplayReport:
    """Send the archive's samples (all, or those named) to the deployed endpoint and compare the answers
    with the expected outputs, as ``conch replay`` does locally. ``runtime`` is anything with boto3's
    ``invoke_endpoint`` (default: a sagemaker-runtime client)."""
    manifest = archive_manifest(archive)
    target = target_model or archive.name
    recorded = {s.name: s for s in manifest.samples}
    unknown = [s for s in samples if s not in recorded]
    if unknown:
        raise DeployError(
            f"{archive.name} has no sample {unknown[0]!r}; its samples: {', '.join(recorded) or 'none'}"
        )
    chosen = [recorded[s] for s in samples] if samples else list(recorded.values())
    report = ReplayReport()
    if not chosen:
        report.rows.append(ReplayRow(target, "-", endpoint, False, "the archive has no samples to replay"))
    runtime = runtime or aws.client("sagemaker-runtime", read_timeout=READ_TIMEOUT_S)
    refusal = json_refusal(manifest.schema.tensors())
    for sample in chosen:
        inputs, expected = sample.input_arrays(), sample.expected_arrays()
        for body in bodies:
            label = f"{endpoint} ({body})"
            if body == "json" and refusal:
                report.rows.append(not_applicable(target, sample.name, label, refusal))
                continue
            start = time.perf_counter()
            try:
                got = invoke(aws, endpoint, target, inputs, body=body, runtime=runtime, component=component)
            except ConchError as exc:
                report.rows.append(ReplayRow(target, sample.name, label, False, str(exc)))
            else:
                millis = (time.perf_counter() - start) * 1000
                report.rows.append(judge(target, sample.name, label, got, expected, sample.checks, millis))
            if progress:
                row = report.rows[-1]
                progress(f"{target} {row.sample} {label}: {row.result}")
    return report


def _model_error(response: Mapping[str, Any], endpoint: str, target_model: str) -> str:
    """SageMaker's ModelError: the container (Triton) answered with an error status."""
    status = response.get("OriginalStatusCode", "?")
    message = response.get("OriginalMessage") or response.get("Error", {}).get("Message", "")
    logs = response.get("LogStreamArn") or f"CloudWatch log group /aws/sagemaker/Endpoints/{endpoint}"
    hint = " (507: the instance ran out of memory for this model)" if str(status) == "507" else ""
    return f"{target_model!r} on endpoint {endpoint!r}: Triton answered HTTP {status}{hint}: {message} (logs: {logs})"
