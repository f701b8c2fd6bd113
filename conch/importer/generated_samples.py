"""Sample payloads of an imported ensemble: inputs generated from each input's dtype and dims, the
outputs the models gave for them on the local tritonserver, kept in a JSON file beside the module
(conch's exact array encoding), for the user to replace with payloads they trust."""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from conch.ensembles.dtypes import DType
from conch.ensembles.samples import encode_array
from conch.ensembles.target import DEFAULT_RELEASE
from conch.ensembles.tensors import Tensor
from conch.errors import ConchError
from conch.scratch import scratch_temp

SAMPLE_NAME = "captured by conch import"


def write_samples(path: Path, records: list[Any], note: str) -> None:
    """Samples (manifest ``SampleRecord``s) as the JSON file a generated module reads with
    ``conch.ensembles.samples.read_samples``."""
    from conch.atomic_write import write_bytes_atomic

    body = {"note": note, "samples": [r.to_json() for r in records]}
    write_bytes_atomic(path, (json.dumps(body, indent=1, sort_keys=True) + "\n").encode())


def record(name: str, inputs: Mapping[str, np.ndarray], expected: Mapping[str, np.ndarray],
           dtypes: Mapping[str, DType]) -> Any:
    """A captured sample as a manifest record, compared with conch's default tolerance (exact for BYTES)."""
    from conch.archive.manifest import SampleRecord
    from conch.ensembles.samples import Exact, Tolerance

    return SampleRecord(name, {k: encode_array(v, dtypes[k]) for k, v in inputs.items()},
                        {k: encode_array(v, dtypes[k]) for k, v in expected.items()},
                        {k: Exact() if dtypes[k] is DType.BYTES else Tolerance() for k in expected})


def generated_inputs(inputs: tuple[Tensor, ...], batching: bool, encoded_images: set[str]) -> dict[str, np.ndarray]:
    """One request: each input filled from its dtype and dims (-1 sizes as 2), batch of one when batching;
    ``encoded_images`` names UINT8 inputs that carry an encoded image (a small JPEG is generated)."""
    rng = np.random.default_rng(0)
    out: dict[str, np.ndarray] = {}
    for t in inputs:
        if t.optional:
            continue
        if t.name in encoded_images:
            data = np.frombuffer(_jpeg(), dtype=np.uint8)
            out[t.name] = data[None, :] if batching else data
            continue
        shape = tuple(2 if d < 0 else d for d in t.dims)
        shape = ((1, *shape)) if batching else shape
        if t.dtype is DType.BYTES:
            array = np.full(shape, b"conch import", dtype=object)
        elif t.dtype is DType.BOOL:
            array = rng.integers(0, 2, shape).astype(bool)
        elif np.issubdtype(t.dtype.numpy, np.integer):
            array = rng.integers(0, 2, shape).astype(t.dtype.numpy)  # ids and masks: 0/1 are valid everywhere
        else:
            array = rng.random(shape).astype(t.dtype.numpy)
        out[t.name] = array
    return out


def _jpeg() -> bytes:
    from PIL import Image

    pixels = (np.indices((32, 48)).sum(axis=0) * 4 % 256).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(np.stack([pixels] * 3, axis=-1)).save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def capture(ensemble: Any, inputs: Mapping[str, np.ndarray], *, sequence: bool = False) -> dict[str, np.ndarray]:
    """The ensemble's outputs for ``inputs`` on the local tritonserver (its local build); ``sequence``: send
    the request as a sequence of one (a step with a sequence batcher needs a correlation ID)."""
    from conch.builder.repository_build import render_repository, write_repository
    from conch.triton.mme import MultiModelClient
    from conch.triton.server import LocalTriton

    repo = render_repository(ensemble, "local", DEFAULT_RELEASE)
    with scratch_temp("conch-import-") as tmp:  # swept by the next run if this one is killed
        folder = write_repository(repo, Path(tmp) / ensemble.name)
        with LocalTriton() as server:
            client = MultiModelClient(server.sagemaker_url, server.http_url, server=server)
            client.load(ensemble.name, folder, timeout=300)
            try:
                if not sequence:
                    return client.invoke_binary(ensemble.name, inputs)
                return client.invoke_json(ensemble.name, inputs, sequence_id=1)
            finally:
                with contextlib.suppress(ConchError):
                    client.unload(ensemble.name)
