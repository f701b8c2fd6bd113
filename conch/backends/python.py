"""Python-backend steps: a user function or class over numpy arrays, run by a generated model.py."""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from typing_extensions import Unpack

from conch.cache import imported_siblings
from conch.ensembles.config import SettingsArgs, StepSettings
from conch.ensembles.environment import PythonEnv
from conch.ensembles.layout import FileSource, Platform
from conch.ensembles.step import BackendFiles, Step, positional_io, pure_flag, renamed_source
from conch.ensembles.target import Release
from conch.ensembles.tensors import Tensor
from conch.errors import BuildError, DeclarationError
from conch.templates import render

RESERVED_FILES = ("model.py", "triton_python_backend_utils.py")  # in a step's version folder, beside its module


class PythonStep(Step):
    """A step whose code is a Python function or class, called once per batch of requests:
    ``PythonStep(name, code, inputs=[...], outputs=[...])``. Given a folder instead of code
    (``PythonStep(name, "models/tokenize", ...)``, a hand-written ``1/model.py`` in it), the step is a
    :class:`PythonModelStep`.

    A function is called as ``code(**inputs)`` with numpy arrays (batch first when batching) and
    returns a dict of outputs or a tuple in the declared order. A class is instantiated once per
    model instance; its optional ``setup(context)`` runs at load (``context.file(name)`` finds the
    step's files), ``__call__(**inputs)`` per batch, and the optional ``teardown()`` at unload.

    The code's module is copied into the model folder and imported there, with the modules and packages beside
    it that it imports (at any depth, at module or function level), so it must be a module of its own that does
    not import conch (conch does not run inside Triton). ``env`` names the packages it
    needs beyond the Triton image's Python (see PythonEnv); without it, the step runs in the image's
    own Python (locally too: the release's Python with the image's packages, docs/image-python.md).

    A build runs the code in its own process when it derives a warmup or sizes shared memory from the
    samples, at every build; ``pure=True`` says the code is pure (what it returns follows from its inputs,
    its module, the modules beside it, the step's files and the installed libraries; not from other files
    it reads or environment variables), so an unchanged rebuild reuses what that run found.
    """

    kind = "python"
    platform = Platform.PYTHON
    lays_out_with_code = False  # model.py is rendered and the module's file named: nothing of the user's runs

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        """``PythonStep(name, FOLDER, ...)``: a hand-written model folder (``1/model.py`` in it) is a
        PythonModelStep; a function or class is a PythonStep."""
        source = args[1] if len(args) > 1 else kwargs.get("source")
        if cls is PythonStep and isinstance(source, str | Path):
            return PythonModelStep(*args, **kwargs)
        return super().__new__(cls)

    def __init__(
        self,
        name: str,
        source: Callable[..., Any] | type | str | Path | None = None,
        *legacy: Sequence[Tensor],
        inputs: Sequence[Tensor] | None = None,
        outputs: Sequence[Tensor] | None = None,
        max_batch_size: int = 0,
        files: Mapping[str, str | Path | bytes] | None = None,
        env: PythonEnv | None = None,
        pure: bool = False,
        cache: bool | None = None,
        code: Callable[..., Any] | type | None = None,
        **options: Unpack[SettingsArgs],
    ) -> None:
        inputs, outputs = positional_io("PythonStep", legacy, inputs, outputs)
        source = renamed_source("PythonStep", "code", code, source)
        if source is None or isinstance(source, str | Path):  # a folder: PythonStep.__new__ made a PythonModelStep
            raise DeclarationError(f"python step {name!r}: give its code, a function or class, as the second "
                                   "argument (or a hand-written model folder, to PythonStep itself)")
        settings = StepSettings.of(max_batch_size, what=f"python step {name!r}", **options)
        super().__init__(name, inputs, outputs, settings)
        self.code = code = source
        self.pure = pure_flag(f"python step {name!r}", pure, cache, "PythonStep")
        if env is not None and not isinstance(env, PythonEnv):
            raise DeclarationError(f"python step {name!r}: env must be a conch.PythonEnv, got {env!r}")
        self.env = env
        self.module_name, self.attr, self.source = _code_location(name, code)
        for t in self.inputs:
            if not t.name.isidentifier() and not _takes_var_keywords(code):
                raise DeclarationError(
                    f"python step {name!r}: input {t.name!r} is passed to the code as a keyword argument, "
                    "so it must be a Python identifier"
                )
        self.files: dict[str, FileSource] = {}
        for key, value in (files or {}).items():
            if Path(key).is_absolute() or ".." in Path(key).parts:
                raise DeclarationError(f"python step {name!r}: file name {key!r} must be a relative path")
            self.files[key] = value if isinstance(value, bytes) else Path(value)

    @classmethod
    def standin_for(cls, step: Step, runner: type, files: Mapping[str, str | Path | bytes]) -> PythonStep:
        """A Python-backend model with ``step``'s name, I/O and settings, running ``runner`` on the CPU: through
        ``standins/standin_bridge.py``, in conch's Python when the stub's (the image's) lacks the runner's framework."""
        import json

        from conch.backends.standins.standin_bridge import StandIn

        source = inspect.getsourcefile(runner)
        assert source is not None  # conch's own runners, files of the package
        spec = {"module": runner.__module__.rpartition(".")[2], "class": runner.__qualname__,
                "framework": runner.framework}  # type: ignore[attr-defined]
        bridged = {**files, f"standin/{Path(source).name}": Path(source),
                   "standin/runner.json": json.dumps(spec, sort_keys=True).encode()}
        standin = cls(step.name, StandIn, inputs=step.inputs, outputs=step.outputs, files=bridged,
                      max_batch_size=step.settings.max_batch_size)
        standin.settings = step.settings  # frozen, and validated when the step was declared
        return standin

    def standin(self) -> PythonStep:
        return self

    def runs_pure(self) -> bool:
        """A stand-in runs conch's own runner on the step's files; user code is pure only when declared so."""
        return self.pure or str(getattr(self.code, "__module__", "")).startswith("conch.")

    def pure_code(self) -> Callable[..., Any] | None:
        """The user code a build keys by content when the step is declared pure (``pure=True``), else None."""
        return self.code if self.pure else None

    def check(self, release: Release) -> None:
        super().check(release)
        for key, value in self.files.items():
            if isinstance(value, Path) and not value.exists():
                raise BuildError(
                    f"python step {self.name!r}: file {key!r} points at {value}, which does not exist; "
                    "fix the path in files= (a file, or a folder shipped with everything under it)"
                )

    def backend_files(self, model_name: str, release: Release, ensemble: str) -> BackendFiles:
        """model.py, the user's module and the step's files, keyed by path in the model folder."""
        model_py = render(
            "python_model.py.j2",
            step=self.name,
            ensemble=ensemble,
            module=self.module_name,
            attr=self.attr,
            is_class=inspect.isclass(self.code),
            batching=self.max_batch_size > 0,
            inputs=[(t.name, t.dtype.numpy_name, t.optional) for t in self.inputs],
            # the shape the code returns is the reshape when one is declared (Triton reshapes it to dims)
            outputs=[(t.name, t.dtype.numpy_name, t.dtype.wire, list(t.reshape if t.reshape is not None else t.dims))
                     for t in self.outputs],
        )
        files: dict[str, FileSource] = {"1/model.py": model_py.encode()}
        for path in sorted(imported_siblings(self.source)):  # the module, and the user's modules beside it it imports
            rel = Path(path).relative_to(self.source.parent).as_posix()
            top = rel.split("/")[0]
            if rel in RESERVED_FILES or top == "files":
                raise BuildError(
                    f"python step {self.name!r}: {self.source.name} imports {top.removesuffix('.py')}, a module of "
                    f"yours beside it whose name the model folder uses (model.py, the Python backend's own "
                    "triton_python_backend_utils, the step's files/); rename that module"
                )
            files[f"1/{rel}"] = Path(path)
        files.update({f"1/files/{k}": v for k, v in self.files.items()})
        return BackendFiles(files)


def _takes_var_keywords(code: Callable[..., Any] | type) -> bool:
    target = code.__call__ if inspect.isclass(code) else code
    try:
        params = inspect.signature(target).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def _code_location(step: str, code: Callable[..., Any] | type) -> tuple[str, str, Path]:
    """Module name, attribute name and source file of a step's code; refuse what cannot be imported."""
    if not callable(code):
        raise DeclarationError(f"python step {step!r}: code must be a function or a class, got {code!r}")
    qualname = getattr(code, "__qualname__", "")
    module = getattr(code, "__module__", None)
    if not qualname or "<" in qualname or "." in qualname or module is None:
        raise DeclarationError(
            f"python step {step!r}: code {qualname or code!r} must be a function or class defined at the top "
            "level of a module, so the generated model.py can import it"
        )
    try:
        source = inspect.getsourcefile(code)
    except TypeError:
        source = None
    if source is None or not Path(source).is_file():
        raise DeclarationError(f"python step {step!r}: cannot find the source file of {qualname}")
    path = Path(source).absolute()  # a module found through a relative sys.path entry has a relative file
    name = path.stem
    if name in ("model", "triton_python_backend_utils") or not name.isidentifier():
        raise DeclarationError(
            f"python step {step!r}: its code lives in {path.name}, a name the Python backend reserves or "
            "cannot import; rename the module"
        )
    problem = _import_problem(path)
    if problem == "relative":
        raise DeclarationError(
            f"python step {step!r}: {path.name} uses a relative import; step modules are copied "
            "alone into the model folder, so import absolute packages only"
        )
    if problem == "conch":
        raise DeclarationError(
            f"python step {step!r}: {path.name} imports conch, but step code runs inside Triton where "
            f"conch is not installed; move {qualname} to a module of its own (e.g. {path.stem}_steps.py)"
        )
    return name, qualname, path


def _import_problem(path: Path) -> str | None:
    """The first top-level import of a step module that cannot run inside Triton ("relative", "conch") or None."""
    for node in ast.parse(path.read_text(encoding="utf-8"), filename=str(path)).body:
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                return "relative"
            names = [node.module or ""]
        if any(n == "conch" or n.startswith("conch.") for n in names):
            return "conch"
    return None


ENV_PARAMETER = "EXECUTION_ENV_PATH"


class PythonModelStep(Step):
    """A Python-backend model written by hand (a ``TritonPythonModel`` in ``<version>/model.py``): its
    folder is laid out as it is, every file but ``config.pbtxt``, which conch renders from this
    declaration. An environment it names in an ``EXECUTION_ENV_PATH`` parameter is kept as a file of the
    folder, on the local target too: its stub runs the release's Python, which loads the environment production
    loads (docs/image-python.md)."""

    kind = "python_model"
    platform = Platform.PYTHON
    lays_out_with_code = False  # its folder is laid out as it is

    def runs_pure(self) -> bool:
        """A hand-written model.py may read anything: what it computes is remembered only when declared pure
        (``pure=True``; it is keyed by every file of its folder)."""
        return self.pure

    def __init__(
        self,
        name: str,
        source: str | Path | None = None,
        *legacy: Sequence[Tensor],
        inputs: Sequence[Tensor] | None = None,
        outputs: Sequence[Tensor] | None = None,
        max_batch_size: int = 0,
        beside: Mapping[str, str | Path] | None = None,
        env: PythonEnv | None = None,
        pure: bool = False,
        folder: str | Path | None = None,
        **options: Unpack[SettingsArgs],
    ) -> None:
        """``source``: the model folder (``1/model.py`` in it). ``beside``: files laid out beside the model
        folders, by their path there (e.g. an environment several models name with
        ``$$TRITON_MODEL_DIRECTORY/../<path>``). ``env``: the environment the model runs in, packed by the
        build as a PythonStep's is (instead of an ``EXECUTION_ENV_PATH`` parameter and ``beside``). ``pure``:
        what the model computes follows from its folder's files and the installed libraries, as for a
        PythonStep."""
        what = f"python_model step {name!r}"
        inputs, outputs = positional_io("PythonModelStep", legacy, inputs, outputs)
        source = renamed_source("PythonModelStep", "folder", folder, source)
        if source is None:
            raise DeclarationError(f"{what}: give its model folder (the one holding 1/model.py) as the second "
                                   "argument")
        settings = StepSettings.of(max_batch_size, what=what, **options)
        super().__init__(name, inputs, outputs, settings)
        if env is not None and not isinstance(env, PythonEnv):
            raise DeclarationError(f"{what}: env must be a conch.PythonEnv, got {env!r}")
        self.env = env
        self.pure = pure_flag(what, pure, None, "PythonModelStep")
        self.folder = Path(source)
        if not self.folder.is_dir():
            raise DeclarationError(f"{what}: model folder {self.folder} does not exist; give the folder that "
                                   "holds 1/model.py")
        versions = sorted(p.parent.name for p in self.folder.glob("*/model.py") if p.parent.name.isdigit())
        if not versions:
            raise DeclarationError(f"{what}: {self.folder} has no <version>/model.py (e.g. 1/model.py with a "
                                   "class TritonPythonModel)")
        self.versions = tuple(versions)
        self.beside: dict[str, Path] = {}
        for key, value in (beside or {}).items():
            parts = Path(key).parts
            if Path(key).is_absolute() or ".." in parts or not parts:
                raise DeclarationError(f"{what}: beside file {key!r} must be a relative path inside the archive")
            self.beside[Path(key).as_posix()] = Path(value)

    def standin(self) -> Step:
        return self

    def backend_files(self, model_name: str, release: Release, ensemble: str) -> BackendFiles:
        """Every file of the folder (but its config.pbtxt), at the same paths."""
        files: dict[str, FileSource] = {}
        for path in sorted(self.folder.rglob("*")):
            rel = path.relative_to(self.folder).as_posix()
            if rel == "config.pbtxt" or "__pycache__" in path.parts:
                continue
            if path.is_file():
                files[rel] = path
            elif path.is_dir() and not any(path.iterdir()):
                files[f"{rel}/"] = b""
        for key, source in self.beside.items():
            if not source.exists():
                raise BuildError(f"python_model step {self.name!r}: beside file {key!r} points at {source}, which "
                                 "does not exist")
            files[f"../{key}"] = source
        return BackendFiles(files)

    def details(self) -> dict[str, object]:
        return {"versions": list(self.versions)}
