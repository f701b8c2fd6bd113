"""The container environment that sizes the Python backend's shared memory on SageMaker's Triton image
for the archives of a deploy (their manifests say what each needs; see conch.builder.shm_sizing)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from conch.builder.shm_sizing import (
    ENV_DEFAULT,
    ENV_GROWTH,
    SAGEMAKER_DEFAULT_BYTES,
    SAGEMAKER_GROWTH_BYTES,
    server_settings,
)
from conch.sagemaker.runtime import built_manifest


def shm_environment(archives: Sequence[Path], environment: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """The environment with the shm variables the archives need added (what the user set with --env wins),
    and one line per decision saying what was set and why."""
    manifests = {a.name: m for a in archives if (m := built_manifest(a)) is not None}  # by hand: nothing said
    default, growth = server_settings(manifests.values())
    needs = {name: m.shm.need_bytes if m.shm else 0 for name, m in manifests.items()}
    largest = max(needs, key=lambda n: needs[n]) if needs else ""
    why = f"{largest}'s largest Python-backend step passes up to {needs.get(largest, 0) / 2**20:.1f} MiB per batch"
    env, said = dict(environment), []
    for key, value, image_default in ((ENV_DEFAULT, default, SAGEMAKER_DEFAULT_BYTES),
                                      (ENV_GROWTH, growth, SAGEMAKER_GROWTH_BYTES)):
        if key in env:
            said.append(f"kept {key}={env[key]} from --env (conch would set {value}: {why})")
        elif value > image_default:
            env[key] = str(value)
            said.append(f"set {key}={value} ({value / 2**20:.0f} MiB; the image's default is "
                        f"{image_default / 2**20:.0f} MiB): {why}")
    if not said:
        defaults = f"{SAGEMAKER_DEFAULT_BYTES / 2**20:.0f} MiB + {SAGEMAKER_GROWTH_BYTES / 2**20:.0f} MiB growth"
        said.append(f"left the Python backend's shared memory at the image's default ({defaults}): {why}")
    return env, said
