"""`conch profile` of a single-model archive made by hand, with --payload: the model alone is a DAG of one step,
itself, profiled on the real tritonserver as SageMaker loads it."""

from __future__ import annotations

from pathlib import Path

import pytest
from seed_archives import pack_repo
from single_models import add_sub_payload, add_sub_repo

from conch.ensembles.payloads import read_payload_file
from conch.errors import ServeError
from conch.perf.profile.dag import dag_of
from conch.perf.profile.load import Body
from conch.perf.profile.local_servers import profile_archives
from conch.perf.profile.measure import Load


def test_a_single_model_archive_is_profiled_with_a_payload(tmp_path: Path) -> None:
    archive = pack_repo(add_sub_repo(), tmp_path / "add_sub.tar.gz")
    (payload,) = read_payload_file(add_sub_payload(tmp_path / "request.json"))
    load = Load((Body.of(payload.inputs),), "request.json", 10, 1)
    (profile,) = profile_archives([archive], lambda _: load, manifest_needed=False)
    assert profile.ensemble == "add_sub.tar.gz"
    (step,) = profile.steps
    assert step.figures.name == "add_sub.tar.gz" and step.figures.requests == 10 and step.critical


def test_a_step_alone_is_still_no_ensemble_to_profile() -> None:
    with pytest.raises(ServeError, match="model 's' is not an ensemble .* profile the ensemble, not one of its steps"):
        dag_of({"name": "s", "input": [{"name": "x"}]})
    dag = dag_of({"name": "s", "input": [{"name": "x"}], "output": [{"name": "y"}]}, alone=True)
    assert [(s.model, s.inputs, s.outputs) for s in dag.steps] == [("s", ("x",), ("y",))]
