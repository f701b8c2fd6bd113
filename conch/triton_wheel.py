"""Where the nvidia-pytriton wheel keeps tritonserver: found without starting (or importing) the server
conch.triton, so that the in-process executor can load the Python backend's utilities from it too."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from conch.errors import ServeError


def pytriton_paths() -> tuple[Path, Path]:
    """(tritonserver folder of the wheel, its shared-library folder)."""
    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        raise ServeError(
            "the nvidia-pytriton wheel is not installed; `pip install nvidia-pytriton` provides tritonserver"
        )
    package = Path(next(iter(spec.submodule_search_locations))).absolute()  # the server runs in its own folder
    server_dir = package / "tritonserver"
    libs = package.parent / "nvidia_pytriton.libs"
    if not (server_dir / "bin" / "tritonserver").is_file():
        raise ServeError(f"no tritonserver binary in {server_dir}; reinstall nvidia-pytriton")
    return server_dir, libs
