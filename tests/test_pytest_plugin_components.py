"""`pytest --conch --conch-endpoint NAME --conch-components` against `conch serve --components`'s local endpoint:
each archive's samples go to its inference component through boto3's InferenceComponentName; and `conch invoke
--components` replays an archive on it the same way."""

from __future__ import annotations

import sys

import pytest
from test_pytest_plugin import _run, project  # noqa: F401 - the fixture, used by name

from conch.builder.discover import load_module_ensembles
from conch.builder.repository_build import build_ensemble
from conch.cli import main
from conch.endpoint.local_components import LocalComponents

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.integration


def test_deployed_items_reach_each_archives_inference_component(
        project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,  # noqa: F811 - the fixture
        capsys: pytest.CaptureFixture[str]) -> None:
    sys.path.insert(0, str(project.path / "ensembles"))
    try:
        (ensemble,) = load_module_ensembles(project.path / "ensembles" / "linear.py")
        archive = build_ensemble(ensemble, project.path / "built", "local")
    finally:
        sys.path.remove(str(project.path / "ensembles"))
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "local")
    with LocalComponents([archive], endpoint_name="text-ic", instance_memory_mb=4096) as local:
        result = _run(project, "--conch", "built", "--conch-endpoint", "text-ic", "--conch-components",
                      "--conch-endpoint-url", local.url, "-v")
        code = main(["invoke", "--endpoint", "text-ic", "--components", "--archive", str(archive), "--sample",
                     "ones", "--endpoint-url", local.url, "--region", "us-east-1"])
        counted = local.metrics_json()["components"]["text-ic-plugin-linear"]
    result.assert_outcomes(passed=2, failed=2)
    assert "plugin_linear[ones @ text-ic (json)] PASSED" in result.stdout.str()
    assert code == 0 and "ones" in capsys.readouterr().out
    assert counted["Invocations"] == 6  # 4 items, 2 bodies of `conch invoke`


def test_invoke_components_needs_an_archive_to_name_the_component(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["invoke", "--endpoint", "text-ic", "--components", "--request", "r.json", "--region",
                 "us-east-1"]) == 2
    assert "--components names each archive's inference component after it: give --archive" in capsys.readouterr().err
