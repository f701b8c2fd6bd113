"""A Python step of an in-process run (conch.executor) loaded in a child process on another interpreter: the
release's image Python, with the image's packages and the step's own environment only, as SageMaker's stub
runs it (the build's observe runs). The child is ``conch/model_worker.py``; each call's arrays go as one
``.npz`` frame each way (the stand-in bridge's frames, ``conch/backends/standins/standin_bridge.py``)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from conch import model_worker, stub_types
from conch.backends.standins import standin_bridge as bridge
from conch.errors import RunError
from conch.image_python import requirement_of, stdlib_since


class _Compiled(Protocol):  # what of a compiled step (conch.compiler) the child needs
    @property
    def model_name(self) -> str: ...

    @property
    def python_in_production(self) -> bool: ...

    @property
    def env(self) -> object: ...

    @property
    def step(self) -> Any: ...


@dataclass(frozen=True)
class ChildPython:
    """Where an executor runs the steps that are Python models in production: a child process each, on this
    interpreter, instead of this process."""

    executable: Path  # the image environment's bin/python
    version: str  # "3.10"
    release: str  # the release whose image Python it stands for: "24.10"
    pb_utils: Path  # Triton's triton_python_backend_utils.py
    environments: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # model -> its env's sys.path

    def runs(self, compiled: _Compiled) -> bool:
        """Whether the step runs in a child: a Python model in production, whose environment (if any) is given."""
        return compiled.python_in_production and (compiled.env is None or compiled.model_name in self.environments)


class ChildFailure(Exception):
    """A call the child answered with a failure; the message continues the step's ``where``."""


class ChildModel:
    """The step's model in its child process: started at construction, loaded by ``loaded()``; ``execute``
    takes the requests conch's executor makes, ``finalize`` ends the child."""

    def __init__(self, python: ChildPython, folder: Path, version: str, compiled: _Compiled, config_json: str,
                 where: str) -> None:
        self.python, self.where, self._env = python, where, compiled.env is not None
        command = [str(python.executable), "-I", model_worker.__file__, str(python.pb_utils), stub_types.__file__,
                   bridge.__file__]
        hello = {"folder": str(folder), "version": version, "name": compiled.model_name,
                 "config": config_json, "outputs": [t.name for t in compiled.step.outputs],
                 "paths": list(python.environments.get(compiled.model_name, ()))}
        self._child: subprocess.Popen[bytes] | None = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=folder)
        assert self._child.stdin is not None
        bridge._write(self._child.stdin, bridge._OK, json.dumps(hello).encode())

    def loaded(self) -> ChildModel:
        """This model once its child has loaded it; RunError (naming a missing module's fix) when it could not."""
        tag, payload = self._answer()
        if tag == bridge._OK:
            return self
        self.finalize()
        if tag is None:
            raise RunError(f"{self.where}: its process on Python {self.python.version} exited while loading it "
                           "(see the output above)")
        failure = json.loads(payload.decode())
        said = f"{failure['type']}: {failure['message']}" if failure["type"] else failure["message"]
        text = (f"{self.where}: loading it on Python {self.python.version} (the {self.python.release} image's, with "
                f"the image's packages{' and its environment' if self._env else ''} only) failed: {said}")
        module = failure.get("module")
        raise RunError(text + (f"; {self._fix(module.split('.')[0])}" if module else ""))

    def _fix(self, module: str) -> str:
        python = self.python.version
        since = stdlib_since(module, python)
        if since is not None:
            return (f"the standard library has {module} from Python {since}, and Triton {self.python.release}'s image "
                    f"runs Python {python}: use a package that provides it on {python} in the step's environment "
                    "(env=conch.PythonEnv(requirements=[...])), or build for a release whose Python has it")
        held = "neither the image's Python nor the step's environment holds it" if self._env else (
            "the image's Python holds its standard library, numpy, pip, setuptools, wheel and virtualenv, and the "
            "step has no environment")
        return (f"{held}: it fails with ModuleNotFoundError on SageMaker too; give the step an environment that "
                f"holds it: env=conch.PythonEnv(requirements=[{requirement_of(module)}])")

    def execute(self, requests: Sequence[Any]) -> list[Any]:
        """Each request's inputs to the child, and its answer as a pb_utils.InferenceResponse."""
        utils = sys.modules[model_worker.PB_UTILS]
        responses = []
        for request in requests:
            if self._child is None or self._child.stdin is None:
                raise ChildFailure(": its process has ended")
            bridge._write(self._child.stdin, bridge._OK, bridge._pack({t.name(): t.as_numpy()
                                                                      for t in request.inputs()}))
            tag, payload = self._answer()
            if tag == bridge._OK:
                responses.append(utils.InferenceResponse([utils.Tensor(name, array) for name, array
                                                          in bridge._unpack(payload).items()]))
            elif tag == model_worker.ERROR_RESPONSE:
                responses.append(utils.InferenceResponse(error=utils.TritonError(payload.decode())))
            elif tag is None:
                raise ChildFailure(f": its process on Python {self.python.version} exited (see the output above)")
            else:
                failure = json.loads(payload.decode())
                raise ChildFailure(f": {failure['message']}" if failure["contract"]
                                   else f" raised {failure['type']}: {failure['message']}")
        return responses

    def _answer(self) -> tuple[bytes | None, bytes]:
        assert self._child is not None and self._child.stdout is not None
        return bridge._read(self._child.stdout)

    def finalize(self) -> None:
        """End the child: its model's finalize runs when its input closes."""
        child, self._child = self._child, None
        if child is None:
            return
        for stream in (child.stdin, child.stdout):
            if stream is not None:
                stream.close()
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
