"""The config Triton completes for a Python model folder without config.pbtxt: SageMaker's serve script leaves
auto-complete on (it does not pass ``--disable-auto-complete-config``), so Triton loads such a folder with the
config its model.py's ``auto_complete_config`` gives. `conch check` runs that function (auto_complete.py) in a
Python of the release's version with the image's packages only (image_python.py: image_environment), as the stub
runs it, when this machine has one, else in conch's own, and judges the folder by the completed config. Triton
completes a Python model's config.pbtxt too when its model.py defines ``auto_complete_config``."""

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
from conch.errors import ServeError
from conch.image_python import find_interpreter, image_environment, image_requirements
from conch.scratch import scratch_temp
from conch.triton_wheel import pytriton_paths

RUN_TIMEOUT = 120.0


@dataclass(frozen=True)
class Completion:
    """What running auto-complete gave: the config as text (None when it failed), and what to tell the user."""

    text: str | None
    level: str  # "warning" (completed, or not judged), "error" (Triton refuses the model) or "ok" (nothing to say)
    file: str
    message: str


def auto_completed(path: Path, name: str, prefix: str, release: Release | str,
                   config: str | None = None) -> Completion | None:
    """The completed config of the Python model folder at ``path`` (its files at ``prefix`` in the archive), or
    None when it has no ``<version>/model.py`` (then it is no model Triton could complete). ``config``: the text of
    its config.pbtxt, which Triton completes too (python_backend runs ``auto_complete_config`` on every model when
    auto-complete is on); None: the folder has none."""
    release = Release.of(release)
    versions = sorted((int(p.parent.name) for p in path.glob("*/model.py") if p.parent.name.isdigit()), reverse=True)
    if not versions:
        return None
    version = str(versions[0])
    model_py = f"{prefix}{version}/model.py"
    request: dict[str, object] = {
               "model_py": str(path / version / "model.py"), "version": version, "version_dir": str(path / version),
               "model_dir": str(path), "backend_dir": str(pytriton_paths()[0] / "backends" / "python"),
               "config": ({"name": name, "backend": "python", "max_batch_size": 0, "input": [], "output": [],
                           "instance_group": [], "parameters": {}} if config is None else _as_json(config))}
    answer, python = _run(request, release)
    if config is not None:
        return _completed_file(answer, python, model_py, name, prefix, config, release)
    if answer is None:
        return Completion(None, "warning", f"{prefix}", f"has no config.pbtxt, so Triton (with SageMaker's flags: "
                          f"auto-complete on) completes one from {model_py}'s auto_complete_config; conch could not "
                          f"run it ({python}), so the folder is not judged: what it serves is known only once it "
                          "loads (e.g. `conch serve` on the archive), or write its config.pbtxt")
    completed = _parsed(answer, python, model_py, None,
                        f"refuses to load {name!r} (there is no config.pbtxt to load instead)")
    if isinstance(completed, Completion):
        return completed
    other = _other(python, release)
    image = f" ({other})" if other else ""
    io = ", ".join(f"{t.name}" for t in [*completed.input, *completed.output]) or "no inputs or outputs"
    return Completion(text_format.MessageToString(completed), "warning", f"{prefix}",
                      f"has no config.pbtxt: Triton with SageMaker's flags (auto-complete on) loads it with the config "
                      f"{model_py}'s auto_complete_config gives, which conch ran on Python {python}{image} and checks "
                      f"here (max_batch_size {completed.max_batch_size}, {io}); write a config.pbtxt to serve it the "
                      "same on a server started with --disable-auto-complete-config")


def _completed_file(answer: dict[str, Any] | None, python: str, model_py: str, name: str, prefix: str,
                    text: str, release: Release) -> Completion:
    """The Completion of a folder whose config.pbtxt Triton completes: its own text when auto-complete cannot be
    run here or leaves it as it is."""
    if answer is None:
        return Completion(text, "warning", model_py, f"defines auto_complete_config, which Triton (with SageMaker's "
                          f"flags: auto-complete on) runs over {prefix}config.pbtxt before loading {name!r}; conch "
                          f"could not run it ({python}), so the config is judged as written")
    completed = _parsed(answer, python, model_py, text,
                        f"(with SageMaker's flags: auto-complete on) refuses to load {name!r}")
    if isinstance(completed, Completion):
        return completed
    written = text_format.Parse(text, model_config_pb2.ModelConfig(), allow_unknown_field=True)
    if completed == written:
        return Completion(text, "ok", model_py, "")
    io = ", ".join(t.name for t in [*completed.input, *completed.output]) or "no inputs or outputs"
    other = _other(python, release)
    ran = f"Python {python}; {other}" if other else f"Python {python}"
    return Completion(text_format.MessageToString(completed), "warning", f"{prefix}config.pbtxt",
                      f"is completed by {model_py}'s auto_complete_config (run on {ran}): Triton with "
                      f"SageMaker's flags (auto-complete on) loads {name!r} with the completed config (max_batch_size "
                      f"{completed.max_batch_size}, {io}), which conch checks here; a server started with "
                      "--disable-auto-complete-config would load the file as written")


def _parsed(answer: dict[str, Any], python: str, model_py: str, text: str | None,
            refusal: str) -> model_config_pb2.ModelConfig | Completion:
    """The config auto_complete_config gave, or the refusal when it failed or gave one Triton cannot read (``text``:
    the config.pbtxt kept with the refusal; ``refusal``: what Triton does, said after "so Triton")."""
    if "error" in answer:
        return Completion(text, "error", model_py, f"auto_complete_config fails on Python {python}, so Triton "
                          f"{refusal}: {answer['error']}{_fix(answer['error'])}")
    try:
        return json_format.ParseDict(answer["config"], model_config_pb2.ModelConfig(), ignore_unknown_fields=True)
    except (json_format.ParseError, TypeError, ValueError) as exc:
        return Completion(text, "error", model_py, f"auto_complete_config gives a config Triton cannot read: {exc}")


def _other(python: str, release: Release) -> str:
    """What to say when auto-complete ran on another Python than the image's (conch's own), else ""."""
    return "" if python == release.stub_python else f"conch's own; Triton {release}'s image runs {release.stub_python}"


def _fix(error: str) -> str:
    """The fix for a module the image's Python lacks (its packages only: docs/image-python.md)."""
    if "ModuleNotFoundError" not in error:
        return ""
    return ("; the image's Python holds only the standard library and the image's few packages: pack this one in "
            "the model's environment (env= on a conch step; EXECUTION_ENV_PATH in a config.pbtxt)")


def _as_json(text: str) -> dict[str, Any]:
    """A config.pbtxt as the JSON Triton hands the Python backend (int64 dims as numbers, as Triton's core writes
    them)."""
    message = text_format.Parse(text, model_config_pb2.ModelConfig(), allow_unknown_field=True)
    as_dict: dict[str, Any] = json_format.MessageToDict(message, preserving_proto_field_name=True)
    # fields Triton's JSON always holds, which pb_utils.ModelConfig reads (MessageToDict leaves empty ones out)
    for key, empty in (("max_batch_size", 0), ("input", []), ("output", []), ("instance_group", []),
                       ("parameters", {})):
        as_dict.setdefault(key, empty)
    for tensor in [*as_dict.get("input", []), *as_dict.get("output", [])]:
        for holder in (tensor, tensor.get("reshape", {})):
            for key in ("dims", "shape"):
                if key in holder:
                    holder[key] = [int(d) for d in holder[key]]
    return as_dict


def _run(request: dict[str, object], release: Release) -> tuple[dict[str, Any] | None, str]:
    """The answer of auto_complete.py by the release's Python in a venv of the image's packages (as the stub runs
    it; docs/image-python.md), else by conch's own Python."""
    found = find_interpreter(release.stub_python)
    interpreters: list[str] = []
    tried = []
    if found is not None:
        try:
            packages = tuple(sorted(set(image_requirements(release))))  # as the stub's (the same cached venv)
            interpreters.append(str(image_environment(found, packages) / "bin" / "python3"))
        except (ServeError, OSError) as exc:
            tried.append(f"the image's packages for Python {found.version}: {exc}")
    for interpreter in [*interpreters, sys.executable]:
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
