"""The one table of Triton's backends: for each, its name, the platforms Triton maps to it, its default model
files and whether each is a folder, the files it loads in their place (by runtime), what conch writes for it,
whether the local server carries it; and conch's step class for each Platform. Every reader of a backend fact
reads it here: Triton's load rules (archive/load_rules.py), `conch check`'s model-file check
(archive/verify.py), the typed config reader (compiler/config_reader.py), `conch import`
(importer/declaration.py), replay's backend check (replays/local_replay.py) and the backends' own file names
(backends/).

Sources (Triton core r24.10, the core of server 2.51):
- names of backends, platforms and default files: core `src/constants.h` (kOnnxRuntimeOnnxPlatform,
  kOnnxRuntimeOnnxFilename, kOnnxRuntimeBackend, ...);
- platform -> backend: core `src/model_config_utils.cc` GetBackendTypeFromPlatform / GetBackendType;
- which file in the first version folder names a backend, in which order, and whether it may be a folder: core
  `src/model_config_utils.cc` AutoCompleteBackendFields (it checks IsDirectory for model.savedmodel, which must
  be one, and for model.graphdef, model.plan and model.pt, which must not; model.onnx may be either);
- PyTorch's runtimes: libtorch (the default) loads model.pt alone (pytorch_backend `src/libtorch.cc` r24.10);
  with `runtime: "model.py"` core's autofill leaves default_model_filename unset and pytorch_backend's Python
  runtime loads model.py, else model.pt (pytorch_backend `src/model.py` _get_model_path r24.10);
- the local server's backends: the nvidia-pytriton wheel's `tritonserver/backends/` holds python alone;
- DALI: not known to core's autofill; its backend loads model.dali, or dali.py serialized at load (dali_backend
  README, "Autoserialization").
"""

from __future__ import annotations

from dataclasses import dataclass

from conch.ensembles.layout import Platform

_CORE = "core src/model_config_utils.cc AutoCompleteBackendFields, src/constants.h r24.10"


@dataclass(frozen=True)
class ModelFile:
    """A default model file in a version folder: its name, the platform Triton's autofill sets when it finds it
    ("" when it sets a backend alone), and whether it is a folder (None: a file or a folder)."""

    name: str
    platform: str = ""
    folder: bool | None = False

    @property
    def entries(self) -> tuple[str, ...]:
        """How it stands in a folder listing (a folder's name ends in '/'), file first."""
        return {False: (self.name,), True: (f"{self.name}/",), None: (self.name, f"{self.name}/")}[self.folder]


@dataclass(frozen=True)
class Backend:
    """One Triton backend."""

    name: str  # the config's ``backend:``
    files: tuple[ModelFile, ...]  # its default model files, in the order Triton's autofill looks for them
    autofilled: bool  # whether core's autofill recognises its files (else only the config names it)
    also_loads: tuple[str, ...] = ()  # files the backend loads in place of its default one
    runtimes: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (the config's runtime, the files that one loads)
    served_by: Platform | None = None  # what conch writes for a config naming this backend alone
    in_wheel: bool = False  # whether the nvidia-pytriton wheel's tritonserver carries it (its backends/ folder)
    source: str = _CORE

    @property
    def platforms(self) -> tuple[str, ...]:
        """The platforms Triton maps to this backend, sorted."""
        return tuple(sorted({f.platform for f in self.files if f.platform}))

    @property
    def model_files(self) -> tuple[str, ...]:
        """Every file name the backend loads from a version folder: its default ones, then the others."""
        return tuple(f.name for f in self.files) + self.also_loads


# In core autofill's order (tensorflow, tensorrt, onnxruntime, openvino, pytorch, python), then the backends it
# does not know.
BACKENDS: tuple[Backend, ...] = (
    Backend("tensorflow", (ModelFile("model.savedmodel", "tensorflow_savedmodel", folder=True),
                           ModelFile("model.graphdef", "tensorflow_graphdef")), autofilled=True),
    Backend("tensorrt", (ModelFile("model.plan", "tensorrt_plan"),), autofilled=True,
            served_by=Platform.TENSORRT_PLAN),
    Backend("onnxruntime", (ModelFile("model.onnx", "onnxruntime_onnx", folder=None),), autofilled=True,
            served_by=Platform.ONNXRUNTIME_ONNX),
    Backend("openvino", (ModelFile("model.xml"),), autofilled=True),
    Backend("pytorch", (ModelFile("model.pt", "pytorch_libtorch"),), autofilled=True,
            runtimes=(("model.py", ("model.py", "model.pt")),), served_by=Platform.PYTORCH_LIBTORCH,
            source=f"{_CORE}; pytorch_backend src/libtorch.cc (model.pt), src/model.py _get_model_path r24.10"),
    Backend("python", (ModelFile("model.py"),), autofilled=True, served_by=Platform.PYTHON, in_wheel=True),
    Backend("dali", (ModelFile("model.dali"),), autofilled=False, also_loads=("dali.py",), served_by=Platform.DALI,
            source="dali_backend README (Autoserialization)"),
)
BY_NAME = {b.name: b for b in BACKENDS}
# what the local tritonserver (the nvidia-pytriton wheel's) runs besides the ensemble scheduler
WHEEL_BACKENDS = tuple(b.name for b in BACKENDS if b.in_wheel)
# platform -> backend (GetBackendTypeFromPlatform)
PLATFORM_BACKENDS = {p: b.name for b in BACKENDS for p in b.platforms}
# (entry in a version folder, backend, platform) in autofill's order; a folder's entry ends in '/'
AUTOFILL_ENTRIES = tuple((entry, b.name, f.platform) for b in BACKENDS if b.autofilled for f in b.files
                         for entry in f.entries)
# a platform, or a backend conch has a step for, -> the model files it loads from a version folder (the others,
# openvino's model.xml with its model.bin and a tensorflow backend without its platform, are not checked)
MODEL_FILES = {**{b.name: b.model_files for b in BACKENDS if b.served_by},
               **{f.platform: (f.name,) for b in BACKENDS for f in b.files if f.platform}}


def model_files(kind: str, runtime: str = "") -> tuple[str, ...]:
    """The model files a config served by ``kind`` (its platform, else its backend) with ``runtime`` (its runtime
    field) loads from a version folder, any one of them; () when conch does not know."""
    backend = BY_NAME.get(PLATFORM_BACKENDS.get(kind, kind))
    by_runtime = dict(backend.runtimes) if backend else {}
    return by_runtime.get(runtime, MODEL_FILES.get(kind, ()))


def default_file(platform: Platform) -> str:
    """The default model file of what ``platform`` names (a platform, or a backend without one)."""
    return MODEL_FILES[platform.value][0]


# conch's step class for each Platform, and the file it lays out in the version folder (None: the whole folder,
# as a Python model is a folder of code)
_STEP_CLASSES = {Platform.ONNXRUNTIME_ONNX: "OnnxStep", Platform.PYTORCH_LIBTORCH: "TorchScriptStep",
                 Platform.TENSORFLOW_GRAPHDEF: "TensorFlowStep", Platform.TENSORRT_PLAN: "TensorRTStep",
                 Platform.DALI: "DaliStep", Platform.PYTHON: "PythonModelStep"}
STEPS: dict[Platform, tuple[str, str | None]] = {
    p: (cls, None if p is Platform.PYTHON else default_file(p)) for p, cls in _STEP_CLASSES.items()}
