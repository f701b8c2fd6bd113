"""SageMaker's multi-model-endpoint contract as Triton's SageMaker front end serves it, in one place for its two
clients (the sync ``MultiModelClient`` of replay and profile, the async ``TritonHop`` of the local MME): the
routes of load (``POST /models``), describe and unload (``/models/<hash>``) and invoke
(``POST /models/<hash>/invoke``), their headers and bodies, a request's sequence parameters, and Triton's error
answers read back. Light on purpose: no HTTP client is imported here."""

from __future__ import annotations

import hashlib
import json
import tempfile
from pathlib import Path
from typing import Any

from conch.wire import TARGET_HEADER

MODELS = "/models"  # POST: register an unpacked archive and load it; GET: the archives loaded


def model_hash(target_model: str) -> str:
    """SageMaker addresses a loaded archive by a hash of its name; the header carries the name."""
    return hashlib.sha256(target_model.encode()).hexdigest()[:32]


def model_path(target_model: str) -> str:
    """``/models/<hash>``: describe (GET) or unload (DELETE) one archive."""
    return f"{MODELS}/{model_hash(target_model)}"


def invoke_path(target_model: str) -> str:
    """``/models/<hash>/invoke``: one invocation of the archive's ensemble."""
    return f"{model_path(target_model)}/invoke"


def load_body(target_model: str, folder: Path) -> dict[str, str]:
    """The JSON body of ``POST /models``: the archive's hash and where it is unpacked."""
    return {"model_name": model_hash(target_model), "url": str(folder)}


def target_headers(target_model: str, content_type: str | None = None) -> dict[str, str]:
    """The TargetModel header every call carries (and the body's Content-Type, for an invocation)."""
    headers = {TARGET_HEADER: target_model}
    if content_type is not None:
        headers["Content-Type"] = content_type
    return headers


def sequence_parameters(sequence_id: int) -> dict[str, Any]:
    """A request sent as a sequence of one with correlation ID ``sequence_id`` (a model with a sequence batcher
    refuses a request without one)."""
    return {"sequence_id": sequence_id, "sequence_start": True, "sequence_end": True}


def error_text(content: bytes, empty: str) -> str:
    """Triton's ``{"error": ...}`` message, or the raw body; ``empty`` when the body is empty."""
    try:
        return str(json.loads(content)["error"])
    except (ValueError, KeyError, TypeError):
        return content.decode("utf-8", "replace") or empty


def root_model_staged(folder: Path) -> Path:
    """An archive with a config.pbtxt at its root, moved into ``folder/model/``, the path SageMaker unpacks it to
    (``/opt/ml/models/<hash>/model``): the front end then loads the root as model ``model``. Triton 2.51 finds
    that folder only under such a path (its path regex leaves the repository empty elsewhere: "failed to
    register ''"), so here the archive becomes the one folder of the folder loaded: the same model, same name.
    Other archives are left as they are."""
    from conch.archive.verify import ROOT_MODEL  # the check's name for it; imported here: this module stays light

    if not (folder / "config.pbtxt").is_file():
        return folder
    # a folder of a name no archive entry holds (a fixed one could clash with an entry of the archive's own)
    inner = Path(tempfile.mkdtemp(prefix=f".{ROOT_MODEL}-", dir=folder))
    for entry in list(folder.iterdir()):
        if entry != inner:
            entry.rename(inner / entry.name)
    inner.rename(folder / ROOT_MODEL)
    return folder
