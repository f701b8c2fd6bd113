"""`conch deploy | invoke | undeploy` for scripts: `--json` is one JSON document on stdout with what a script
needs next, `--quiet` prints nothing on success (against moto's server on 127.0.0.1)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from conftest import INSTANCE, ROLE, Moto
from test_cli_deploy import aws_args, conch
from test_cli_output import _on_a_terminal, without_escapes

pytestmark = pytest.mark.integration


def document(result: subprocess.CompletedProcess[str]) -> dict:  # type: ignore[type-arg]
    assert result.stdout.count("\n") == 1, (result.stdout, result.stderr)
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def test_deploy_invoke_undeploy_json_and_quiet(moto: Moto, bucket: str, archives: list[Path], tmp_path: Path) -> None:
    dist = archives[0].parent
    deploy = ["deploy", str(dist), "--bucket", bucket, "--prefix", "mme", "--role", ROLE, "--instance-type", INSTANCE,
              *aws_args(moto)]
    first = conch(*deploy, "--json")
    assert first.returncode == 0, first.stderr
    doc = document(first)
    assert (doc["endpoint"], doc["action"], doc["status"], doc["region"]) == ("text-mme", "created", "InService",
                                                                              "us-east-1")
    assert doc["model_data_url"] == "s3://conch-models/mme/" and doc["instance_type"] == INSTANCE
    assert [(u["target_model"], u["action"], u["url"]) for u in doc["uploads"]] == [
        ("linear_a.tar.gz", "uploaded", "s3://conch-models/mme/linear_a.tar.gz"),
        ("linear_b.tar.gz", "uploaded", "s3://conch-models/mme/linear_b.tar.gz")]
    assert doc["autoscaling"] is None and doc["model"].startswith("text-mme-")

    again = conch(*deploy, "--quiet")
    assert again.returncode == 0 and again.stdout == "" and again.stderr == "", again.stderr

    invoked = conch("invoke", "--archive", str(archives[0]), "--body", "json", *aws_args(moto), "--json")
    assert invoked.returncode == 1  # moto answers with canned text, not Triton's: the row fails, the JSON holds it
    rows = document(invoked)["rows"]
    assert [(r["ensemble"], r["sample"], r["endpoint"], r["passed"]) for r in rows] == [
        ("linear_a.tar.gz", "two rows", "text-mme (json)", False)]

    request = tmp_path / "request.json"
    request.write_text(json.dumps({"inputs": [{"name": "X", "shape": [1, 4], "datatype": "FP32", "data": [1] * 4}]}))
    raw = conch("invoke", "--request", str(request), "--target-model", "linear_b.tar.gz", *aws_args(moto), "--json")
    assert raw.returncode == 0, raw.stderr
    assert isinstance(document(raw), dict)
    quiet = conch("invoke", "--request", str(request), "--target-model", "linear_b.tar.gz", *aws_args(moto), "-q")
    assert quiet.returncode == 0 and quiet.stdout == "" and quiet.stderr == ""

    gone = conch("undeploy", *aws_args(moto), "--json")
    assert gone.returncode == 0, gone.stderr
    deleted = document(gone)
    assert deleted["endpoint"] == "text-mme" and "endpoint text-mme" in deleted["deleted"]

    assert conch(*deploy, "--quiet").returncode == 0
    silent = conch("undeploy", *aws_args(moto), "--quiet")
    assert silent.returncode == 0 and silent.stdout == "" and silent.stderr == ""


def test_dry_run_json_lists_every_call(moto: Moto, bucket: str, archives: list[Path]) -> None:
    planned = conch("deploy", *map(str, archives), "--bucket", bucket, "--role", ROLE, "--instance-type", INSTANCE,
                    *aws_args(moto), "--dry-run", "--json")
    assert planned.returncode == 0, planned.stderr
    doc = document(planned)
    assert doc["dry_run"] is True and doc["region"] == "us-east-1"
    writes = [(c["service"], c["operation"]) for c in doc["calls"] if not c["read"]]
    assert ("s3", "PutObject") in writes and ("sagemaker", "CreateEndpoint") in writes
    assert not moto.called("PutObject") and not moto.called("CreateEndpoint")


def test_invoke_json_file_is_still_read_as_the_request(moto: Moto, tmp_path: Path) -> None:
    request = tmp_path / "request.json"
    request.write_text("{}")
    stray = conch("invoke", "stray-word", *aws_args(moto))
    assert stray.returncode == 2
    assert stray.stderr.strip() == ("conch: error: unexpected 'stray-word': invoke takes options only (a request "
                                    "body is --request FILE)")
    old = conch("invoke", "--json", str(request), "--target-model", "x.tar.gz", *aws_args(moto))
    assert old.returncode == 2 and old.stdout == ""
    assert old.stderr.splitlines() == [
        f"conch: warning: `invoke --json {request}` is spelt `invoke --request {request} --json` now",
        f"conch: error: --request {request}: not a KServe v2 request body (no 'inputs' list); "
        'write {"inputs": [...]}']


def test_uploads_draw_a_bar_of_bytes_on_a_terminal(moto: Moto, bucket: str, archives: list[Path]) -> None:
    code, out, err = _on_a_terminal("deploy", *map(str, archives), "--bucket", bucket, "--role", ROLE,
                                    "--instance-type", INSTANCE, *aws_args(moto), "--no-wait")
    assert code == 0 and "endpoint text-mme created" in out
    plain = without_escapes(err)
    size = sum(a.stat().st_size for a in archives) / 1000
    assert re.search(rf"uploading ━+ {size:.1f}/{size:.1f} kB", plain), plain  # every byte counted once
    assert "uploading /" in plain  # the ordinary lines, above the bar
