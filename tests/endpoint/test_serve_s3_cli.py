"""`conch serve --mme s3://bucket/prefix --s3-endpoint-url URL` typed on the command line (README: the local MME
over an S3-compatible server) answers from the bucket, and every socket it and its tritonserver listen on is
bound to 127.0.0.1, but Triton 2.51's own SageMaker port, which cannot be (README, known limits)."""

from __future__ import annotations

import ipaddress
import os
import subprocess
import sys
from pathlib import Path

import boto3
import numpy as np
import psutil
import pytest
from conftest import linear_ensemble, ready_line
from mme_archives import EXPECTED, invoke_linear, runtime

from conch.builder.repository_build import build_ensemble

pytestmark = pytest.mark.integration


def listening(pid: int) -> dict[int, str]:
    """Port -> address of every TCP socket a process and its descendants listen on."""
    pids = {pid} | {p.pid for p in psutil.Process(pid).children(recursive=True)}
    return {c.laddr.port: c.laddr.ip for c in psutil.net_connections(kind="tcp")
            if c.status == psutil.CONN_LISTEN and c.pid in pids}


def loopback(ip: str) -> bool:
    address = ipaddress.ip_address(ip)
    mapped = getattr(address, "ipv4_mapped", None)  # gRPC listens on IPv6 with the IPv4 address mapped
    return (mapped or address).is_loopback


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
        ports = listening(proc.pid)
        front = int(ready["url"].rsplit(":", 1)[1])
        triton = ready["triton"]
        assert {front, triton["http_port"], triton["grpc_port"], triton["sagemaker_port"]} <= set(ports), ports
        exposed = {port: ip for port, ip in ports.items() if not loopback(ip)}
        assert exposed == {triton["sagemaker_port"]: "0.0.0.0"}, (ports, ready)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
