"""`conch serve --mme s3://bucket/prefix --s3-endpoint-url URL` typed on the command line (README: the local MME
over an S3-compatible server) answers from the bucket, and every socket it and its tritonserver listen on is
bound to the host's 127.0.0.1; Triton 2.51's own SageMaker port, which cannot be bound to an address, listens
in a network namespace whose only interface is its loopback (docs/fidelity.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import boto3
import numpy as np
import pytest
from conftest import linear_ensemble, ready_line
from listeners import exposed, host_listeners, interfaces, loopback, namespace_listeners, tritonserver_pids
from mme_archives import EXPECTED, invoke_linear, runtime

from conch.builder.repository_build import build_ensemble
from conch.triton.network_namespace import refused

pytestmark = pytest.mark.integration


def test_serve_mme_from_s3_answers_and_listens_on_loopback_only(tmp_path: Path, moto_server: str) -> None:
    archive = build_ensemble(linear_ensemble("s3_cli"), tmp_path / "dist", "local")
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    s3 = boto3.client("s3", endpoint_url=moto_server, region_name="us-east-1", aws_access_key_id="testing",
                      aws_secret_access_key="testing")
    s3.create_bucket(Bucket="conch-cli")
    s3.upload_file(str(archive), "conch-cli", f"team/{archive.name}")
    proc = subprocess.Popen([sys.executable, "-m", "conch.cli", "serve", "--mme", "s3://conch-cli/team/",
                             "--s3-endpoint-url", moto_server, "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        ready = ready_line(proc)
        np.testing.assert_array_equal(invoke_linear(runtime(ready["url"]), archive.name), EXPECTED)
        ports = host_listeners(proc.pid)
        front = int(ready["url"].rsplit(":", 1)[1])
        triton = ready["triton"]
        assert {front, triton["http_port"], triton["grpc_port"], triton["sagemaker_port"]} <= set(ports), ports
        if refused():  # tritonserver on the host, as conch said at start
            assert {p: ip for p, ip in ports.items() if not loopback(ip)} == {triton["sagemaker_port"]: "0.0.0.0"}
        else:
            assert exposed(proc.pid) == ({}, {}), (ports, ready)
            (server,) = tritonserver_pids(proc.pid)
            assert interfaces(server) == ["lo"] and namespace_listeners(server)[triton["sagemaker_port"]] == "0.0.0.0"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
