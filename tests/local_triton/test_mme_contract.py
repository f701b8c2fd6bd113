"""The MME contract both clients of Triton's SageMaker front end send (the sync MultiModelClient, the local MME's
async hop): the routes, headers and load body SageMaker's platform uses, and Triton's error answers read back."""

from __future__ import annotations

import hashlib
from pathlib import Path

from conch.endpoint.hop import Answer
from conch.triton.mme_contract import (
    error_text,
    invoke_path,
    load_body,
    model_hash,
    model_path,
    root_model_staged,
    sequence_parameters,
    target_headers,
)


def test_an_archive_is_addressed_by_the_hash_of_its_target_model_and_named_in_the_header() -> None:
    digest = hashlib.sha256(b"a.tar.gz").hexdigest()[:32]
    assert model_hash("a.tar.gz") == digest
    assert model_path("a.tar.gz") == f"/models/{digest}"
    assert invoke_path("a.tar.gz") == f"/models/{digest}/invoke"
    assert load_body("a.tar.gz", Path("/srv/a")) == {"model_name": digest, "url": "/srv/a"}
    assert target_headers("a.tar.gz") == {"X-Amzn-SageMaker-Target-Model": "a.tar.gz"}
    assert target_headers("a.tar.gz", "application/json") == {
        "X-Amzn-SageMaker-Target-Model": "a.tar.gz", "Content-Type": "application/json"}


def test_a_request_of_a_sequence_model_is_a_sequence_of_one() -> None:
    assert sequence_parameters(7) == {"sequence_id": 7, "sequence_start": True, "sequence_end": True}


def test_tritons_error_answers_are_read_the_same_by_both_clients() -> None:
    assert error_text(b'{"error": "Request for unknown model"}', "HTTP 400") == "Request for unknown model"
    assert error_text(b'{"message": "other shape"}', "HTTP 400") == '{"message": "other shape"}'
    assert error_text(b'["not", "an", "object"]', "HTTP 400") == '["not", "an", "object"]'
    assert error_text(b"plain text from a proxy", "HTTP 502") == "plain text from a proxy"
    assert error_text(b"", "Bad Gateway") == "Bad Gateway"
    # the async hop's answers name their status when Triton sent no body
    assert Answer(503, b"", "").error_text() == "HTTP 503"


def test_a_root_config_is_staged_as_the_folder_model_whatever_the_archive_holds(tmp_path: Path) -> None:
    """SageMaker's path for a root config.pbtxt is <hash>/model: the archive's entries move there, its own
    hidden '.model' folder and a folder named 'model' included (a fixed staging name once clashed with them)."""
    (tmp_path / "config.pbtxt").write_text('backend: "python"\n')
    for name in ("1", ".model", "model"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "f.txt").write_text(name)
    assert root_model_staged(tmp_path) == tmp_path
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]
    staged = tmp_path / "model"
    assert sorted(p.name for p in staged.iterdir()) == [".model", "1", "config.pbtxt", "model"]
    assert (staged / ".model" / "f.txt").read_text() == ".model"
    assert (staged / "model" / "f.txt").read_text() == "model"


def test_an_archive_without_a_root_config_is_left_as_it_is(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    assert root_model_staged(tmp_path) == tmp_path
    assert [p.name for p in tmp_path.iterdir()] == ["m"]
