"""Triton's own verdict on many small repositories, from one real tritonserver: every repository is one more
--model-repository of one server in explicit model control (model names are unique across them), and each served
model is loaded through the repository API, its error text kept, then unloaded. The API answers "failed to poll
from model repository" or "contains models that are not available" when a config itself is refused; Triton
writes the reason to its log ("Poll failed for model directory 'X': ..."), which is kept with the answer."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

import httpx

from conch.triton.server import LocalTriton

LOAD_TIMEOUT_S = 120
POLL_FAILED = re.compile(r"Poll failed for model directory '([^']*)': (.*?)\"?$")


def triton_verdicts(repositories: Iterable[tuple[Path, str]], workdir: Path) -> dict[str, str]:
    """``{served: Triton's error ("" when it loaded)}`` for each (repository folder, model to load): the load's
    answer, then each poll failure Triton logged during it, as ``dir: reason`` lines."""
    pairs = list(repositories)
    args = tuple(f"--model-repository={repo}" for repo, _ in pairs)
    verdicts: dict[str, str] = {}
    # SageMaker's flags (server docker/sagemaker/serve): auto-complete on, as LocalTriton starts it by default
    with LocalTriton(workdir, extra_args=args) as server:
        for _, name in pairs:
            seen = server.log_path.stat().st_size
            answer = httpx.post(f"{server.http_url}/v2/repository/models/{name}/load", timeout=LOAD_TIMEOUT_S)
            if answer.is_success:
                verdicts[name] = ""
                continue
            with server.log_path.open("rb") as log:
                log.seek(seen)
                polls = [m.group(1) + ": " + m.group(2) for line in log.read().decode(errors="replace").splitlines()
                         if (m := POLL_FAILED.search(line))]
            verdicts[name] = "\n".join([str(answer.json().get("error", answer.text)).strip(), *polls])
            httpx.post(f"{server.http_url}/v2/repository/models/{name}/unload",
                       json={"parameters": {"unload_dependents": True}}, timeout=LOAD_TIMEOUT_S)
    return verdicts
