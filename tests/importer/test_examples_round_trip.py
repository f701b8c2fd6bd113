"""Every example's archive, imported and built again, is the same archive: each config the same ModelConfig,
each file byte for byte. Production archives for the examples that build here; resnet_tensorrt's plan needs
a GPU, so its local archive (and seed 002's prebuilt plan, in test_import.py) stand in for it. Building the
examples takes minutes (two pack an environment from the package index): each is built once per session."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from same_archive import assert_same, contents
from seed_archives import inception_repo
from test_import import build_module

from conch.builder.discover import load_module_ensembles
from conch.builder.repository_build import build_ensemble
from conch.importer.convert import import_sources

pytestmark = [pytest.mark.slow, pytest.mark.integration]

EXAMPLES = Path(__file__).parent.parent.parent / "ensembles"
BUILDS = {"image_classifier": "production", "resnet_pytorch": "production", "text_embeddings": "production",
          "bert_torchscript": "production", "resnet_tensorrt": "local"}


@pytest.fixture(scope="session")
def example_archives(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("examples")
    archives = {}
    for name, target in BUILDS.items():
        try:
            (ensemble,) = load_module_ensembles(EXAMPLES / f"{name}.py")
            archives[name] = build_ensemble(ensemble, out, target)
        finally:
            sys.modules.pop(name, None)  # the imported module of the same name is built next
    return archives


@pytest.mark.parametrize("name", sorted(BUILDS))
def test_an_example_archive_round_trips(name: str, example_archives: dict[str, Path], tmp_path: Path) -> None:
    archive = example_archives[name]
    (imported,) = import_sources([archive], tmp_path / "out", samples=True)
    assert imported.messages == []
    assert imported.sample.endswith("sample(s) from the archive's manifest")
    rebuilt = build_module(imported.module, tmp_path / "built", BUILDS[name])
    assert assert_same(archive, rebuilt) == imported.configs_equal + imported.files_identical


def test_seed_002_hand_written_configs_round_trip_with_real_model_files(
        example_archives: dict[str, Path], tmp_path: Path) -> None:
    """The seed's DALI + Inception configs as written by hand, over model files that DALI and TensorFlow
    read (those of the image_classifier example)."""
    built = contents(example_archives["image_classifier"])
    repo = {**inception_repo(), "dali/1/model.dali": built["image_classifier__dali/1/model.dali"],
            "inception_graphdef/1/model.graphdef": built["image_classifier__inception_graphdef/1/model.graphdef"]}
    root = tmp_path / "repo"
    for rel, data in repo.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        if data is None:
            (root / rel).mkdir(exist_ok=True)
        else:
            (root / rel).write_bytes(data)
    (imported,) = import_sources([root], tmp_path / "out", samples=False)
    assert imported.messages == []
    assert_same(root, build_module(imported.module, tmp_path / "built"))
