"""Archives and clients the local-MME tests share: one small ensemble built once, copied under many names,
and boto3's real sagemaker-runtime client pointed at the local front."""

from __future__ import annotations

import io
import json
import shutil
import tarfile
from pathlib import Path
from typing import Any

import numpy as np

from conch.wire import json_request

X = np.arange(8, dtype=np.float32).reshape(2, 4)
EXPECTED = X * 2 + 1  # linear_ensemble: Z = 2 X + 1


def copies(archive: Path, folder: Path, names: list[str]) -> list[str]:
    """``archive`` copied into ``folder`` under each name; the names, as TargetModels."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.copyfile(archive, folder / name)
    return names


def runtime(url: str) -> Any:
    """boto3's sagemaker-runtime client, unchanged, pointed at the local MME (no retries: each call once)."""
    import boto3
    from botocore.config import Config

    return boto3.client("sagemaker-runtime", endpoint_url=url, region_name="us-east-1", aws_access_key_id="x",
                        aws_secret_access_key="x",
                        config=Config(retries={"total_max_attempts": 1}, read_timeout=300))


def invoke_linear(rt: Any, target_model: str, x: np.ndarray = X) -> np.ndarray:
    """Z for ``x`` from ``target_model`` through the SageMaker runtime API (KServe v2 JSON body)."""
    body, content_type = json_request({"X": x})
    response = rt.invoke_endpoint(EndpointName="local", TargetModel=target_model, ContentType=content_type, Body=body)
    out = json.loads(response["Body"].read())["outputs"][0]
    return np.array(out["data"], dtype=np.float32).reshape(out["shape"])


def tar_with(entries: list[tuple[tarfile.TarInfo, bytes | None]], path: Path) -> Path:
    """A hand-made .tar.gz holding exactly ``entries`` (for hostile archives)."""
    with tarfile.open(path, "w:gz") as tar:
        for info, data in entries:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path
