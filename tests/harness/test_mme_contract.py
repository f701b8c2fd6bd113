"""The MME contract both clients of Triton's SageMaker front end send (the sync MultiModelClient, the local MME's
async hop): the routes, headers and load body SageMaker's platform uses, and Triton's error answers read back."""

from __future__ import annotations

import hashlib
from pathlib import Path

from conch.harness.endpoint.hop import Answer
from conch.harness.mme_contract import (
    error_text,
    invoke_path,
    load_body,
    model_hash,
    model_path,
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
