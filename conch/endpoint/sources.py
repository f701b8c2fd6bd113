"""Where the local MME finds its archives: a folder, or an S3 prefix (as ``ModelDataUrl`` names it).

A TargetModel is the archive's key relative to the folder or prefix, as on SageMaker
(``invoke_endpoint(TargetModel="x.tar.gz")`` serves ``<ModelDataUrl>/x.tar.gz``).
"""

from __future__ import annotations

import functools
import shutil
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Protocol

from conch.aws import AwsTarget, endpoint_url_problem
from conch.endpoint.protocol import ValidationError
from conch.errors import ServeError


class ModelSource(Protocol):
    """Fetches one archive by TargetModel; ``describe()`` says where from, for messages and the ready line."""

    def fetch(self, target_model: str, dest: Path) -> None: ...

    def describe(self) -> str: ...


def checked_key(target_model: str) -> str:
    """A TargetModel as a relative key: no empty, absolute or ``..`` parts (it names a file under the source)."""
    path = PurePosixPath(target_model)
    if not target_model or path.is_absolute() or any(p in ("..", ".", "") for p in target_model.split("/")):
        raise ValidationError(
            f"TargetModel {target_model!r} is not a key relative to the model prefix; name an archive under it, "
            "e.g. 'text_embeddings.tar.gz'"
        )
    return target_model


def missing(target_model: str, where: str) -> ValidationError:
    """SageMaker's answer for a TargetModel with no object under ModelDataUrl."""
    return ValidationError(
        f"Failed to download model data for TargetModel {target_model!r}: there is no object {where}. "
        "Upload the archive there (conch deploy) or check the TargetModel spelling"
    )


@dataclass(frozen=True)
class FolderSource:
    folder: Path

    def fetch(self, target_model: str, dest: Path) -> None:
        path = self.folder / checked_key(target_model)
        if not path.is_file():
            raise missing(target_model, f"at {path}")
        shutil.copyfile(path, dest)

    def describe(self) -> str:
        return str(self.folder)


@dataclass(frozen=True)
class S3Source:
    bucket: str
    prefix: str
    endpoint_url: str | None = None
    region: str = "us-east-1"

    @functools.cached_property
    def client(self) -> Any:
        """One client for every download (boto3's clients are thread-safe; making one costs ~0.1 s of CPU)."""
        return AwsTarget(self.region, self.endpoint_url).client("s3", read_timeout=120.0)

    def key(self, target_model: str) -> str:
        return f"{self.prefix}{checked_key(target_model)}"

    def fetch(self, target_model: str, dest: Path) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        key = self.key(target_model)
        try:
            self.client.download_file(self.bucket, key, str(dest))
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in ("404", "NoSuchKey", "NotFound"):
                raise missing(target_model, f"at s3://{self.bucket}/{key}") from None
            raise ServeError(f"downloading s3://{self.bucket}/{key} for TargetModel {target_model!r}: {exc}") from None
        except BotoCoreError as exc:
            raise ServeError(f"downloading s3://{self.bucket}/{key} for TargetModel {target_model!r}: {exc}") from None

    def describe(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


def open_source(spec: str | Path, s3_endpoint_url: str | None = None) -> ModelSource:
    """``s3://bucket/prefix`` or a folder of archives."""
    text = str(spec)
    if text.startswith("s3://"):
        bucket, _, prefix = text[len("s3://"):].partition("/")
        if not bucket:
            raise ServeError(f"{text}: name a bucket, e.g. s3://my-bucket/models/")
        prefix = prefix.strip("/")
        problem = endpoint_url_problem(s3_endpoint_url)
        if problem:
            raise ServeError(f"--s3-endpoint-url: {problem}")
        return S3Source(bucket, f"{prefix}/" if prefix else "", s3_endpoint_url)
    folder = Path(spec)
    if not folder.is_dir():
        raise ServeError(f"model source {folder} is not a folder of archives nor an s3:// prefix")
    return FolderSource(folder.resolve())
