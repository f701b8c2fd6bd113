"""The config Triton completes for a Python model folder without config.pbtxt: SageMaker's serve script leaves
auto-complete on (it does not pass ``--disable-auto-complete-config``), so Triton loads such a folder with the
config its model.py's ``auto_complete_config`` gives. `conch check` runs that function (auto_complete.py) in a
Python of the release's version when this machine has one that can import Triton's utils, else in conch's own,
and judges the folder by the completed config."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2

from conch.archive import auto_complete
from conch.ensembles.target import Release
from conch.image_python import find_interpreter
from conch.scratch import scratch_temp
from conch.triton_wheel import pytriton_paths

RUN_TIMEOUT = 120.0


@dataclass(frozen=True)
class Completion:
    """What running auto-complete gave: the config as text (None when it failed), and what to tell the user."""

    text: str | None
    level: str  # "warning" (completed, or not judged) or "error" (Triton refuses the model)
    file: str
    message: str


def auto_completed(path: Path, name: str, prefix: str, release: Release | str) -> Completion | None:
    """The completed config of the Python model folder at ``path`` (its files at ``prefix`` in the archive), or
    None when it has no ``<version>/model.py`` (then it is no model Triton could complete)."""
    release = Release.of(release)
    versions = sorted((int(p.parent.name) for p in path.glob("*/model.py") if p.parent.name.isdigit()), reverse=True)
    if not versions:
        return None
    version = str(versions[0])
    model_py = f"{prefix}{version}/model.py"
    request: dict[str, object] = {
               "model_py": str(path / version / "model.py"), "version": version, "version_dir": str(path / version),
               "model_dir": str(path), "backend_dir": str(pytriton_paths()[0] / "backends" / "python"),
               "config": {"name": name, "backend": "python", "max_batch_size": 0, "input": [], "output": [],
                          "instance_group": [], "parameters": {}}}
    answer, python = _run(request, release.stub_python)
    if answer is None:
        return Completion(None, "warning", f"{prefix}", f"has no config.pbtxt, so Triton (with SageMaker's flags: "
                          f"auto-complete on) completes one from {model_py}'s auto_complete_config; conch could not "
                          f"run it ({python}), so the folder is not judged: what it serves is known only once it "
                          "loads (e.g. `conch serve` on the archive), or write its config.pbtxt")
    if "error" in answer:
        return Completion(None, "error", model_py, f"auto_complete_config fails on Python {python}, so Triton "
                          f"refuses to load {name!r} (there is no config.pbtxt to load instead): {answer['error']}")
    try:
        config = json_format.ParseDict(answer["config"], model_config_pb2.ModelConfig(), ignore_unknown_fields=True)
    except (json_format.ParseError, TypeError, ValueError) as exc:
        return Completion(None, "error", model_py, f"auto_complete_config gives a config Triton cannot read: {exc}")
    image = ("" if python == release.stub_python
             else f" (conch's own; Triton {release}'s image runs {release.stub_python})")
    io = ", ".join(f"{t.name}" for t in [*config.input, *config.output]) or "no inputs or outputs"
    return Completion(text_format.MessageToString(config), "warning", f"{prefix}",
                      f"has no config.pbtxt: Triton with SageMaker's flags (auto-complete on) loads it with the config "
                      f"{model_py}'s auto_complete_config gives, which conch ran on Python {python}{image} and checks "
                      f"here (max_batch_size {config.max_batch_size}, {io}); write a config.pbtxt to serve it the "
                      "same on a server started with --disable-auto-complete-config")


def _run(request: dict[str, object], python: str) -> tuple[dict[str, Any] | None, str]:
    """The answer of auto_complete.py by the release's Python (when it can import Triton's utils), else by conch's."""
    found = find_interpreter(python)
    release_python = found.executable if found is not None else None
    tried = []
    for interpreter in ([str(release_python)] if release_python else []) + [sys.executable]:
        with scratch_temp("conch-complete-") as tmp:
            try:  # the model's code may write files where it runs: a folder of its own
                done = subprocess.run([interpreter, "-s", auto_complete.__file__], input=json.dumps(request),
                                      capture_output=True, text=True, timeout=RUN_TIMEOUT, cwd=tmp)
                answer = json.loads(done.stdout.rsplit("\n", 1)[-1])
            except (OSError, subprocess.SubprocessError, ValueError) as exc:
                tried.append(f"{interpreter}: {type(exc).__name__}: {exc}")
                continue
        if "setup" in answer:
            tried.append(f"Python {answer.get('python')}: {answer['setup']}")
            continue
        return answer, str(answer.get("python"))
    return None, "; ".join(tried)
