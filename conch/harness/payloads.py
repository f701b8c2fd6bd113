"""The requests a ``--payload FILE`` gives replay and bench in place of an archive's samples (an archive made by
hand has no conch manifest, so no samples): one KServe v2 JSON request, or the samples file `conch import`
writes."""

from __future__ import annotations

from pathlib import Path

from conch.ensembles.payloads import Payload, parse_request
from conch.ensembles.samples import read_samples
from conch.errors import ConchError, ServeError

__all__ = ["Payload", "read_payloads"]


def read_payloads(path: Path) -> list[Payload]:
    """The requests of a ``--payload`` file: one KServe v2 JSON request (nothing expected: every endpoint must
    answer with the served model's outputs, alike), or the samples file `conch import` writes (inputs and
    expected outputs)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ServeError(f"--payload {path}: cannot read it ({exc.strerror or exc})") from None
    if b'"samples"' in data:
        try:
            return [Payload(name, inputs, expected, checks, request=path)
                    for name, inputs, expected, checks in read_samples(path)]
        except ConchError as exc:
            raise ServeError(f"--payload {exc}") from None
    try:
        return [Payload(path.name, parse_request(data), request=path)]
    except (ValueError, ConchError) as exc:
        raise ServeError(f"--payload {path}: not a KServe v2 JSON request ({exc}); write "
                         '{"inputs": [{"name": ..., "shape": [...], "datatype": ..., "data": [...]}]}, or give the '
                         "samples file `conch import` writes") from None
