"""Where packed environments go in an archive, and how steps point at them (EXECUTION_ENV_PATH)."""

from __future__ import annotations

import sys
from dataclasses import replace

from conch.archive.manifest import EnvironmentRecord
from conch.builder.pack import PackedEnv, Progress, pack
from conch.ensembles.environment import ENV_DIR, PythonEnv
from conch.ensembles.layout import FileSource, ModelSpec
from conch.ensembles.target import Release, Target
from conch.errors import BuildError


def local_python() -> str:
    """The Python conch runs in (the local target packs for the release's Python, as production does)."""
    return f"{sys.version_info.major}.{sys.version_info.minor}"


class EnvLayout:
    """Packs each distinct environment of an ensemble once and gives every step that uses it the same copy."""

    def __init__(self, target: Target, release: Release, progress: Progress | None, refresh: bool = False) -> None:
        self.target, self.release, self.progress, self.refresh = target, release, progress, refresh
        # the local server's stub runs the release's Python too, so both targets pack the same bytes
        self.python = release.stub_python
        self.files: dict[str, FileSource] = {}
        self.manifest: dict[str, EnvironmentRecord] = {}
        self._paths: dict[PythonEnv, str] = {}

    def attach(self, env: PythonEnv, spec: ModelSpec) -> ModelSpec:
        """The spec with EXECUTION_ENV_PATH pointing at the (shared) packed copy of ``env``."""
        if "EXECUTION_ENV_PATH" in spec.settings.parameters:
            raise BuildError(f"model {spec.name!r}: set its environment with env=, not an EXECUTION_ENV_PATH parameter")
        if env.unpacked and not self.release.env_dirs_supported:
            raise BuildError(
                f"model {spec.name!r}: an unpacked environment needs release 23.07 or later (target is "
                f"{self.release}); use unpacked=False"
            )
        rel = self._paths.get(env)
        if rel is None:
            rel = self._add(env)
            self._paths[env] = rel
        # Must start with $$TRITON_MODEL_DIRECTORY/; the copy sits beside the model folders.
        parameters = {**spec.settings.parameters, "EXECUTION_ENV_PATH": f"$$TRITON_MODEL_DIRECTORY/../{rel}"}
        return replace(spec, settings=replace(spec.settings, parameters=parameters))

    def within_model_folder(self, spec: ModelSpec) -> ModelSpec:
        """The spec of a model that is the archive's one folder: its environment is inside its folder (a folder
        beside it would be a second folder at the root, and SageMaker's front end could serve that one)."""
        path = spec.settings.parameters.get("EXECUTION_ENV_PATH")
        if path is None:
            return spec
        parameters = {**spec.settings.parameters,
                      "EXECUTION_ENV_PATH": path.replace("$$TRITON_MODEL_DIRECTORY/../", "$$TRITON_MODEL_DIRECTORY/")}
        return replace(spec, settings=replace(spec.settings, parameters=parameters))

    def _add(self, env: PythonEnv) -> str:
        packed: PackedEnv = pack(env, self.python, progress=self.progress, refresh=self.refresh)
        stem = f"{env.name}-{packed.key[:12]}"
        rel = f"{ENV_DIR}/{stem}" if env.unpacked else f"{ENV_DIR}/{stem}.tar.gz"
        self.files[rel] = packed.folder if env.unpacked else packed.archive
        self.manifest[rel] = EnvironmentRecord(packed.python, env.describe(), tuple(packed.pins), packed.key,
                                               env.unpacked)
        return rel
