"""Property: every declaration conch accepts builds and loads in the real tritonserver; every one it
rejects is rejected at declaration or build with a ConchError naming its cause, never at load.

Declarations are drawn through the public API from valid values mixed with the holes once found
(NUL bytes, non-ASCII and over-long names, names of conch's own files, empty or fractional dims, bad
reshapes, label counts off by one, versions the archive lacks, NUL in parameters)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import property_steps
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from conch import ConchError, Ensemble, PythonStep, Tensor, VersionPolicy
from conch.archive.extract import safe_extract
from conch.archive.fleet_check import check_archive_models
from conch.builder.repository_build import build_ensemble
from conch.triton.mme import MultiModelClient
from conch.triton.server import LocalTriton

pytestmark = pytest.mark.integration

def mostly(valid: st.SearchStrategy[Any], hostile: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Valid values 7 times in 8 per field, so that some declarations are accepted and loaded."""
    return st.sampled_from(range(8)).flatmap(lambda i: hostile if i == 7 else valid)


MODEL_NAMES = mostly(
    st.from_regex(r"[a-z][a-z0-9_]{0,10}", fullmatch=True),
    st.sampled_from(["a\x00b", "modèle", "x" * 250, "conch-envs", "conch-manifest.json", "-dash", ".dot", "123",
                     "semi;colon", "sp ace", "tab\t", "ok.name-1"]),
)
TENSOR_NAMES = mostly(
    st.sampled_from(["x", "in/put:0", "INPUT__0", "a.b-c"]),
    st.sampled_from(["a\x00", "é", "a b", "x\"y", "a\\b", "line\nbreak", ""]),
)
DIMS = mostly(st.lists(st.sampled_from([-1, 1, 2, 3]), min_size=1, max_size=3),
              st.lists(st.sampled_from([0, -2, 1.5, 2]), min_size=0, max_size=2))
RESHAPES = mostly(st.none(), st.lists(st.sampled_from([-1, 0, 1, 2, 3, 6, -2]), max_size=3))
TEXT = mostly(st.sampled_from(["v", "", "two words", "quote\"d", "back\\slash", "new\nline", "ü", "tab\t"]),
              st.sampled_from(["nul\x00byte", "\x01"]))
POLICIES = mostly(st.sampled_from([None, {"latest": 1}, {"all": True}, {"specific": (1,)}]),
                  st.sampled_from([{"specific": (2,)}, {"specific": (1, 2)}, {"latest": 0}, {"latest": 1.5}]))
_counter = itertools.count()


@dataclass
class Declaration:
    ensemble: str
    tensor: str
    dtype: str
    dims: list[Any]
    reshape: list[Any] | None
    ensemble_batch: int
    step_batch: int
    parameters: dict[str, str]
    policy: dict[str, Any] | None
    labels: int | None  # how many labels, off the class count by -1, 0 or +1


@st.composite
def declarations(draw: st.DrawFn) -> Declaration:
    dims = draw(DIMS)
    return Declaration(
        ensemble=draw(MODEL_NAMES),
        tensor=draw(TENSOR_NAMES),
        dtype=draw(st.sampled_from(["FP32", "INT64", "UINT8", "BOOL", "BYTES"])),
        dims=dims,
        reshape=draw(RESHAPES),
        ensemble_batch=draw(mostly(st.sampled_from([0, 2, 4]), st.sampled_from([-1, 16, "4"]))),
        step_batch=draw(st.sampled_from([0, 4, 8])),
        parameters=draw(st.dictionaries(TEXT, TEXT, max_size=2)),
        policy=draw(POLICIES),
        labels=draw(mostly(st.sampled_from([None, None, 0]), st.sampled_from([-1, 1]))),
    )


def declare(d: Declaration) -> Ensemble:
    """The declaration through the public API (raises DeclarationError where it is wrong)."""
    labels = None
    if d.labels is not None:
        classes = 1
        for size in d.dims:
            classes *= size if isinstance(size, int) and size > 0 else 1
        labels = [f"c{i}" for i in range(max(classes + d.labels, 0))]
    ens = Ensemble(d.ensemble, max_batch_size=d.ensemble_batch)
    x = ens.input("X", d.dtype, d.dims)
    policy = VersionPolicy(**d.policy) if d.policy is not None else None
    step = PythonStep("echo", property_steps.echo, inputs=[Tensor(d.tensor, d.dtype, d.dims, reshape=d.reshape)],
                      outputs=[Tensor("y", d.dtype, d.dims, labels=labels)], max_batch_size=d.step_batch,
                      parameters=d.parameters, version_policy=policy)
    ens.output("Y", step(x))
    return ens


def holds(d: Declaration, tmp_path: Path, triton: LocalTriton) -> None:
    try:
        archive = build_ensemble(declare(d), tmp_path / f"b{next(_counter)}", "local")
    except ConchError as exc:
        event("rejected")
        message = str(exc)
        assert message and "Traceback" not in message
        causes = ("name", "dims", "reshape", "label", "version_policy", "parameter", "max_batch_size", "tensor")
        assert any(cause in message for cause in causes), message
        return
    event("accepted: built and loaded")
    report = check_archive_models(archive)[0]
    assert report.ok, report.lines()
    target = f"prop{next(_counter)}"
    folder = triton.workdir / "models" / target
    safe_extract(archive, folder)
    with MultiModelClient(triton.sagemaker_url, triton.http_url, server=triton) as client:
        client.load(target, folder, timeout=300)  # a refusal here is the bug this test hunts
        client.unload(target)  # waited for as SageMaker waits: a load sent before it ends races it (docs/testing.md)


SETTINGS = {"deadline": None, "suppress_health_check": [HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
            "derandomize": True}


@settings(max_examples=20, **SETTINGS)  # about 1 in 6 is accepted: 3 or 4 server loads (300 in the slow tier)
@given(d=declarations())
def test_accepted_declarations_load_and_rejected_ones_name_their_cause(
    d: Declaration, tmp_path: Path, triton_alone: LocalTriton
) -> None:
    holds(d, tmp_path, triton_alone)


@pytest.mark.slow
@settings(max_examples=300, **{**SETTINGS, "derandomize": False})
@given(d=declarations())
def test_many_more_declarations(d: Declaration, tmp_path: Path, triton_alone: LocalTriton) -> None:
    holds(d, tmp_path, triton_alone)
