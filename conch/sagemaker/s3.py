"""Upload archives under one S3 prefix, the folder an MME serves: ``s3://bucket/prefix/<archive name>``.

The key relative to the prefix is the TargetModel a caller names, so an archive keeps its file name.
An archive whose bytes are already there (same sha256, recorded in the object's metadata) is skipped.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from conch.archive.fleet_check import ArchiveModels, archive_models, read_archive_models
from conch.archive.manifest import sha256
from conch.aws import AwsTarget, aws_errors, error_code, http_status
from conch.errors import DeployError

SHA256_METADATA = "conch-sha256"  # stored as x-amz-meta-conch-sha256
# What the fleet check needs of the archive (conch.archive.fleet_check.ArchiveModels.summary), so `conch check s3://…`
# and `conch deploy` read a prefix with one HEAD per archive; left out past this size (S3 allows 2 KB of user
# metadata in all), and then the archive is streamed instead.
FLEET_METADATA = "conch-fleet"
FLEET_METADATA_MAX = 1500
MULTIPART_THRESHOLD = 64 * 1024 * 1024
MULTIPART_CHUNK = 64 * 1024 * 1024  # S3 allows 10,000 parts: 64 MiB parts cover archives up to 625 GiB


@dataclass(frozen=True)
class ModelLocation:
    """An S3 prefix an MME serves from. ``model_data_url`` is what ``create_model`` takes."""

    bucket: str
    prefix: str = ""

    def __post_init__(self) -> None:
        if not self.bucket or "/" in self.bucket or self.bucket.startswith("s3:"):
            raise DeployError(f"bucket {self.bucket!r}: give the bucket name alone (e.g. my-models), not a URL")
        object.__setattr__(self, "prefix", self.prefix.strip("/"))
        if "//" in self.prefix:
            raise DeployError(f"prefix {self.prefix!r} has an empty folder ('//'); SageMaker would not find the keys")

    @property
    def model_data_url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}/" if self.prefix else f"s3://{self.bucket}/"

    @classmethod
    def parse(cls, url: str) -> ModelLocation:
        """``s3://bucket/prefix`` (the form ``ModelDataUrl`` takes)."""
        if not url.startswith("s3://") or not url[len("s3://"):].split("/")[0]:
            raise DeployError(f"{url!r}: give an S3 prefix as s3://bucket/prefix")
        bucket, _, prefix = url[len("s3://"):].partition("/")
        return cls(bucket, prefix)

    def key(self, target_model: str) -> str:
        return f"{self.prefix}/{target_model}" if self.prefix else target_model

    def url(self, target_model: str) -> str:
        return f"s3://{self.bucket}/{self.key(target_model)}"


@dataclass(frozen=True)
class Upload:
    """What happened to one archive: ``uploaded``, ``replaced`` (other bytes were there) or ``unchanged``."""

    archive: Path
    target_model: str
    url: str
    sha256: str
    action: str
    stamped: str | None = None  # why it went up stamped (conch.sagemaker.upload_plan), None: as built
    steps: Mapping[str, str] = field(default_factory=dict)  # original step -> stamped step


def upload_archives(
    archives: Sequence[Path],
    location: ModelLocation,
    aws: AwsTarget,
    *,
    multipart_threshold: int = MULTIPART_THRESHOLD,
    multipart_chunk: int = MULTIPART_CHUNK,
    progress: Callable[[str], None] | None = None,
    sent: Callable[[int], None] | None = None,
    bucket_checked: bool = False,
    read: Mapping[Path, ArchiveModels] | None = None,
) -> list[Upload]:
    """Upload each archive to ``location`` unless the same bytes are there already; ``sent`` hears how many
    bytes of the archives went up (or were found there already), for a progress bar. ``bucket_checked``: the
    caller already ran :func:`check_bucket` (reading what is under the prefix); ``read``: what the caller's
    fleet check read of archives (their S3 metadata; the others are read here)."""
    names = [a.name for a in archives]
    for archive in archives:
        if not archive.name.endswith(".tar.gz"):
            raise DeployError(f"{archive}: an MME serves .tar.gz archives; build one with `conch build`")
        if not archive.is_file():
            raise DeployError(f"{archive}: no such archive")
        if names.count(archive.name) > 1:
            raise DeployError(
                f"two archives are named {archive.name}; under one prefix the file name is the TargetModel, "
                "so names must be unique"
            )
    s3 = aws.client("s3", read_timeout=300)
    if not bucket_checked:
        check_bucket(s3, location, aws)
    read = read or {}
    return [_upload_one(s3, archive, location, multipart_threshold, multipart_chunk, progress, sent,
                        read.get(archive)) for archive in archives]


def check_bucket(s3: Any, location: ModelLocation, aws: AwsTarget) -> None:
    """The bucket exists, is readable with these credentials, and is in the endpoint's region."""
    from botocore.exceptions import ClientError

    bucket = location.bucket
    with aws_errors(f"checking S3 bucket {bucket!r}"):
        try:
            response = s3.head_bucket(Bucket=bucket)
        except ClientError as exc:
            status = http_status(exc)
            if status == 404 or error_code(exc) in ("404", "NoSuchBucket"):
                raise DeployError(
                    f"S3 bucket {bucket!r} does not exist (region {aws.region}); create it "
                    f"(aws s3 mb s3://{bucket} --region {aws.region}) or pass an existing one with --bucket"
                ) from None
            if status == 403:
                raise DeployError(
                    f"access denied to S3 bucket {bucket!r}: the credentials in use need s3:ListBucket on "
                    f"arn:aws:s3:::{bucket} and s3:GetObject, s3:PutObject on "
                    f"arn:aws:s3:::{bucket}/{location.key('*')}"
                ) from None
            raise
    bucket_region = response.get("BucketRegion") or response["ResponseMetadata"]["HTTPHeaders"].get(
        "x-amz-bucket-region"
    )
    if bucket_region and bucket_region != aws.region:
        raise DeployError(
            f"S3 bucket {bucket!r} is in {bucket_region} but the endpoint is in {aws.region}; SageMaker reads "
            f"model data only from its own region: pass --region {bucket_region} or a bucket in {aws.region}"
        )


def _upload_one(
    s3: Any,
    archive: Path,
    location: ModelLocation,
    multipart_threshold: int,
    multipart_chunk: int,
    progress: Callable[[str], None] | None,
    sent: Callable[[int], None] | None = None,
    models: ArchiveModels | None = None,
) -> Upload:
    from boto3.exceptions import S3UploadFailedError
    from boto3.s3.transfer import TransferConfig

    key = location.key(archive.name)
    url = location.url(archive.name)
    digest = sha256(archive)
    existing = _remote_sha256(s3, location.bucket, key)
    if existing == digest:
        if progress:
            progress(f"unchanged {url} (sha256 {digest[:12]})")
        if sent:
            sent(archive.stat().st_size)
        return Upload(archive, archive.name, url, digest, "unchanged")
    config = TransferConfig(multipart_threshold=multipart_threshold, multipart_chunksize=multipart_chunk)
    metadata = {SHA256_METADATA: digest}
    summary = (models or archive_models(archive)).summary()
    if len(summary) <= FLEET_METADATA_MAX:
        metadata[FLEET_METADATA] = summary
    if progress:
        size = archive.stat().st_size
        progress(f"uploading {archive} -> {url} ({size / 1e6:.1f} MB)")
    # A PUT (and a multipart upload's CompleteMultipartUpload) is atomic in S3: readers see the old object
    # or the whole new one, never part of it. If a multipart upload fails, boto3's transfer manager aborts
    # it, so no object (and no billed orphan parts) is left; the previous archive stays in place.
    try:
        with aws_errors(f"uploading {archive.name} to {url}", _denied_hint(location, key)):
            s3.upload_file(
                str(archive), location.bucket, key, Config=config,
                ExtraArgs={"Metadata": metadata, "ContentType": "application/gzip"},
                **({"Callback": sent} if sent else {}),
            )
    except S3UploadFailedError as exc:  # boto3 wraps the ClientError of the failing part or PUT
        text = str(exc)
        hint = f"; {_denied_hint(location, key)}" if "AccessDenied" in text or "403" in text else ""
        raise DeployError(f"uploading {archive.name} to {url} failed: {text}{hint}") from None
    return Upload(archive, archive.name, url, digest, "uploaded" if existing is None else "replaced")


def _remote_sha256(s3: Any, bucket: str, key: str) -> str | None:
    """The sha256 conch recorded on ``key``; None if there is no object, ``''`` if it has no record."""
    from botocore.exceptions import ClientError

    denied = f"the credentials need s3:GetObject on arn:aws:s3:::{bucket}/{key}"
    with aws_errors(f"reading s3://{bucket}/{key}", denied):
        try:
            head = s3.head_object(Bucket=bucket, Key=key)
        except ClientError as exc:
            if http_status(exc) == 404:
                return None
            raise
    return str(head.get("Metadata", {}).get(SHA256_METADATA, ""))


def _denied_hint(location: ModelLocation, key: str) -> str:
    return f"the credentials need s3:PutObject on arn:aws:s3:::{location.bucket}/{key}"


def remote_archives(location: ModelLocation, aws: AwsTarget,
                    progress: Callable[[str], None] | None = None) -> list[ArchiveModels]:
    """The configs and manifest of every archive under ``location`` (any ``.tar.gz`` key below the prefix; its
    TargetModel is the key relative to the prefix), each streamed from S3 through the safe extraction's rules,
    nothing written to disk. Objects with one ETag (the same bytes) are read once."""
    s3 = aws.client("s3", read_timeout=300)
    check_bucket(s3, location, aws)
    start = f"{location.prefix}/" if location.prefix else ""
    objects: list[dict[str, Any]] = []
    token: dict[str, str] = {}
    with aws_errors(f"listing {location.model_data_url}",
                    f"the credentials need s3:ListBucket on arn:aws:s3:::{location.bucket}"):
        while True:
            page = s3.list_objects_v2(Bucket=location.bucket, Prefix=start, **token)
            objects += [o for o in page.get("Contents", []) if o["Key"].endswith(".tar.gz")]
            if not page.get("IsTruncated"):
                break
            token = {"ContinuationToken": page["NextContinuationToken"]}
    read: dict[str, ArchiveModels] = {}
    fleet = []
    for obj in sorted(objects, key=lambda o: str(o["Key"])):
        key, etag = str(obj["Key"]), str(obj.get("ETag", ""))
        target_model = key[len(start):]
        with aws_errors(f"reading s3://{location.bucket}/{key}",
                        f"the credentials need s3:GetObject on arn:aws:s3:::{location.bucket}/{key}"):
            recorded = s3.head_object(Bucket=location.bucket, Key=key).get("Metadata", {}).get(FLEET_METADATA)
            summary = ArchiveModels.from_summary(target_model, recorded) if recorded else None
            if summary is None and (etag not in read or not etag):
                if progress:
                    progress(f"reading the configs of s3://{location.bucket}/{key}")
                body = s3.get_object(Bucket=location.bucket, Key=key)["Body"]
                try:
                    read[etag] = read_archive_models(body, target_model, int(obj.get("Size", 0)) or None)
                finally:
                    body.close()
        if summary is not None:  # what conch recorded when it uploaded these bytes: nothing to download
            fleet.append(summary)
            continue
        seen = read[etag]
        fleet.append(replace(seen, target_model=target_model,
                             problem=seen.problem and seen.problem.replace(seen.target_model, target_model)))
    return fleet
