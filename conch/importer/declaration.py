"""Write one ensemble of an imported repository as a readable Python declaration, in the style of the
examples: steps with their tensors and settings, then the ensemble's wiring with its own tensor names."""

from __future__ import annotations

import json
import keyword
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from conch.ensembles.backends_table import STEPS, default_file
from conch.ensembles.config import InstanceGroup, InstanceKind, StepSettings, Warmup
from conch.ensembles.layout import Platform
from conch.ensembles.tensors import Tensor
from conch.importer.repository import ModelFolder, Repository

_FILE_ARGUMENT = {"TensorRTStep": "plan="}
_READS_IO = ("OnnxStep", "TensorFlowStep", "TensorRTStep")  # steps that read undeclared I/O from their file


@dataclass
class Declaration:
    """The module text of one ensemble, the files it references, and what it could not say."""

    ensemble: str
    module: str  # file name
    text: str = ""
    messages: list[str] = field(default_factory=list)


def module_name(ensemble: str) -> str:
    """A file name conch build imports the module under: an identifier that shadows no standard module."""
    name = re.sub(r"\W", "_", ensemble)
    if not name or name[0].isdigit() or keyword.iskeyword(name) or name in sys.stdlib_module_names \
            or name in ("conch", "numpy"):
        name = f"ensemble_{name}"
    return f"{name}.py"


class _Names:
    """Python variable names, unique within the module."""

    def __init__(self) -> None:
        self.taken = {"Path", "HERE", "MODELS", "read_samples"}

    def __call__(self, wanted: str) -> str:
        name = re.sub(r"\W", "_", wanted).strip("_") or "tensor"
        if name[0].isdigit() or keyword.iskeyword(name):
            name = f"t_{name}"
        base, n = name, 2
        while name in self.taken:
            name, n = f"{base}_{n}", n + 1
        self.taken.add(name)
        return name


def declare(repo: Repository, ensemble: ModelFolder, out_file: Path, samples: str | None,
            captured: bool = True) -> Declaration:
    """The module for ``ensemble``; model files are referenced relative to ``out_file``'s folder;
    ``samples``: the module's sample file, ``captured`` when its outputs were captured, not given."""
    decl = Declaration(ensemble.name, out_file.name)
    names = _Names()
    var = names(ensemble.name)
    spec = ensemble.read.spec
    where = f"{ensemble.name}/config.pbtxt"
    steps: list[tuple[str, ModelFolder]] = []
    for st in spec.ensemble_steps:
        model = repo.models.get(st.model_name)
        if model is None:
            decl.messages.append(f"{where}: ensemble_scheduling step {st.model_name!r}: no model folder of that "
                                 "name (or its config could not be read)")
            continue
        if model.platform not in STEPS:
            decl.messages.append(f"{model.name}/config.pbtxt: platform: {model.platform.value!r} has no conch step")
            continue
        if st.model_version not in (-1, 1):
            decl.messages.append(f"{where}: ensemble_scheduling step {st.model_name!r}: model_version "
                                 f"{st.model_version}: conch's ensembles run the step's version 1 or latest (-1)")
        steps.append((names(model.name.removeprefix(f"{ensemble.name}__") or model.name), model))
    folder = out_file.parent.resolve()
    used = sorted({m.platform for _, m in steps}, key=lambda p: STEPS[p][0])
    classes = sorted({"Ensemble", "Tensor", *(STEPS[p][0] for p in used), *_setting_classes(steps)})
    lines = [
        _docstring(f"Ensemble {ensemble.name!r}, imported by `conch import` from {repo.source.name}: its models keep "
                   "their\nnames, files and settings; `conch build` turns this file back into the same archive. "
                   "Edit freely."),
        "",
        "from pathlib import Path",
        "",
        f"from conch import {', '.join(classes)}",
    ]
    if samples:
        lines.append("from conch.ensembles.samples import read_samples")
    models = Path(os.path.relpath(repo.root.resolve(), folder)).as_posix()
    lines += ["", f"MODELS = Path(__file__).parent / {_q(models)}", ""]
    for step_var, model in steps:
        lines += _step(step_var, model, decl.messages)
        lines.append("")
    lines += _wiring(var, ensemble, steps, names, decl.messages)
    if samples:
        lines += [
            "",
            *(["# Captured by `conch import`: generated inputs and the outputs the models gave for them. Replace",
               "# them with payloads and expected outputs you trust."] if captured else
              ["# The samples of the imported archive's manifest, with their checks."]),
            f"for name, inputs, expected, checks in read_samples(Path(__file__).parent / {_q(samples)}):",
            f"    {var}.sample(name, inputs, expected, checks)",
        ]
    decl.text = "\n".join(lines) + "\n"
    return decl


def _docstring(text: str) -> str:
    """``text`` as a triple-quoted docstring when it reads back as itself, else as a plain string literal: a
    name of the source (a folder, an archive) must not end the string and run as code when the module is
    imported."""
    if '"' in text or "\\" in text or not text.replace("\n", "").isprintable():
        return repr(text)
    return f'"""{text}"""'


def _setting_classes(steps: list[tuple[str, ModelFolder]]) -> set[str]:
    used: set[str] = set()
    for _, model in steps:
        s = model.read.spec.settings
        if s.instance_groups:
            used.add("InstanceGroup")
        if s.dynamic_batching is not None:
            used.add("DynamicBatching")
        if s.version_policy is not None:
            used.add("VersionPolicy")
        if s.warmups:
            used.add("Warmup")
    return used


def _q(value: object) -> str:
    """A str (or a dict of str) as Python source in double quotes, as the examples write them."""
    return json.dumps(value, ensure_ascii=False)


def _tensor(t: Tensor, model: ModelFolder) -> str:
    args = [_q(t.name), _q(t.dtype.wire), repr(list(t.dims))]
    if t.optional:
        args.append("optional=True")
    if t.reshape is not None:
        args.append(f"reshape={list(t.reshape)!r}")
    if isinstance(t.labels, Path):
        args.append(f"labels=MODELS / {_q(model.name + '/' + t.labels.name)}")
    return f"Tensor({', '.join(args)})"


def _step(var: str, model: ModelFolder, messages: list[str]) -> list[str]:
    spec = model.read.spec
    cls, filename = STEPS[model.platform]
    _kept_files(model, filename, messages)
    path = f"MODELS / {_q(model.name)}" if filename is None else f"MODELS / {_q(model.name + '/1/' + filename)}"
    lines = [f"{var} = {cls}(", f"    {_q(model.name)},", f"    {_FILE_ARGUMENT.get(cls, '')}{path},"]
    if spec.outputs or cls not in _READS_IO:  # else the step reads its I/O from the model file
        lines += _tensors("inputs", [_tensor(t, model) for t in spec.inputs])
        lines += _tensors("outputs", [_tensor(t, model) for t in spec.outputs])
    shared = _beside(model)
    if shared:
        lines.append("    beside={" + ", ".join(f"{_q(k)}: MODELS / {_q(k)}" for k in shared) + "},")
    lines += [f"    {line}," for line in _settings(spec.settings, model.platform)]
    if cls == "DaliStep" and not _declares_outputs(model):
        lines.append("    as_is=True,  # serialized elsewhere: kept byte for byte")
    warmup = sorted(p.relative_to(model.folder / "warmup").as_posix() for p in (model.folder / "warmup").rglob("*")
                    if p.is_file()) if filename is not None else []
    if warmup:
        lines.append("    warmup_files={" + ", ".join(f"{_q(w)}: MODELS / {_q(f'{model.name}/warmup/{w}')}"
                                                     for w in warmup) + "},")
    lines.append(")")
    return lines


def _tensors(argument: str, tensors: list[str]) -> list[str]:
    """``inputs=[...]`` on one line when it fits, else one tensor per line."""
    line = f"    {argument}=[{', '.join(tensors)}],"
    if len(line) <= 110:
        return [line]
    return [f"    {argument}=[", *(f"        {t}," for t in tensors), "    ],"]


def _declares_outputs(model: ModelFolder) -> bool:
    """Whether a model.dali already holds what conch writes into it (its outputs' dtypes and ranks)."""
    from conch.backends import dali_serialized
    from conch.errors import ConchError

    path = model.folder / "1" / default_file(Platform.DALI)
    try:
        raw = path.read_bytes()
        declared = [(t.dtype, len(t.dims)) for t in model.read.spec.outputs]
        return dali_serialized.declare_outputs(raw, declared, model.name) == raw
    except (OSError, ConchError, ValueError):
        return True  # the build says what is wrong with it


def _beside(model: ModelFolder) -> list[str]:
    """Files beside the model folders a Python model names as its environment (conch-built archives keep
    environments shared by several steps there)."""
    if model.platform is not Platform.PYTHON:
        return []
    env = model.read.spec.settings.parameters.get("EXECUTION_ENV_PATH", "")
    prefix = "$$TRITON_MODEL_DIRECTORY/../"
    if not env.startswith(prefix):
        return []
    rel = env[len(prefix):]
    inside = not Path(rel).is_absolute() and ".." not in Path(rel).parts  # else the parameter is kept as written
    return [rel] if inside and (model.folder.parent / rel).exists() else []


def _settings(s: StepSettings, platform: Platform) -> list[str]:
    out = [f"max_batch_size={s.max_batch_size}"]
    if s.instance_groups:
        out.append(f"instance_group=[{', '.join(_group(g) for g in s.instance_groups)}]")
    if s.dynamic_batching is not None:
        d = s.dynamic_batching
        args = []
        if d.preferred_batch_size:
            args.append(f"preferred_batch_size={list(d.preferred_batch_size)!r}")
        if d.max_queue_delay_microseconds:
            args.append(f"max_queue_delay_microseconds={d.max_queue_delay_microseconds}")
        if d.preserve_ordering:
            args.append("preserve_ordering=True")
        out.append(f"dynamic_batching=DynamicBatching({', '.join(args)})")
    if s.warmups:
        out.append(f"warmup=[{', '.join(_warmup(w) for w in s.warmups)}]")
    if s.version_policy is not None:
        v = s.version_policy
        arg = "all=True" if v.all else f"specific={tuple(v.specific)!r}" if v.specific else f"latest={v.latest}"
        out.append(f"version_policy=VersionPolicy({arg})")
    if s.parameters:
        out.append(f"parameters={_q(dict(sorted(s.parameters.items())))}")
    if s.config_fields:
        out.append(f"config_fields={_text_block(s.config_fields.text)}")
    return out


def _warmup(w: Warmup) -> str:
    args = [_q(w.name)]
    if w.batch_size != 1:
        args.append(f"batch_size={w.batch_size}")
    if w.count != 1:
        args.append(f"count={w.count}")
    if w.random_data:
        args.append("random_data=True")
    return f"Warmup({', '.join(args)})"


def _group(g: InstanceGroup) -> str:
    kind = g.kind.value if isinstance(g.kind, InstanceKind) else str(g.kind)
    args = [_q(kind)]
    if g.count != 1:
        args.append(f"count={g.count}")
    if g.gpus:
        args.append(f"gpus={tuple(g.gpus)!r}")
    return f"InstanceGroup({', '.join(args)})"


def _text_block(text: str) -> str:
    """Proto text as a readable triple-quoted string."""
    if '"""' in text or "\\" in text:
        return repr(text)
    return '"""\n' + text.rstrip("\n") + '\n"""'


def _kept_files(model: ModelFolder, filename: str | None, messages: list[str]) -> None:
    """Name in a message every file of the folder the step does not lay out."""
    files = {p.relative_to(model.folder).as_posix() for p in model.folder.rglob("*") if p.is_file()}
    if filename is None:
        return
    kept = {"config.pbtxt", f"1/{filename}", *(f for f in files if f.startswith("warmup/"))}
    kept |= {t.labels.name for t in model.read.spec.outputs if isinstance(t.labels, Path)}
    for rel in sorted(files - kept):
        messages.append(f"{model.name}/{rel}: not kept: a {model.platform.value} step lays out "
                        f"1/{filename}, its label files and warmup/ only")
    if f"1/{filename}" not in files:
        messages.append(f"{model.name}/1/{filename}: missing: conch lays out version 1 of the model under "
                        "this name")


def _wiring(var: str, ensemble: ModelFolder, steps: list[tuple[str, ModelFolder]], names: _Names,
            messages: list[str]) -> list[str]:
    spec = ensemble.read.spec
    s = spec.settings
    args = [_q(ensemble.name), f"max_batch_size={s.max_batch_size}", 'step_prefix=""']
    if s.config_fields:
        args.append(f"config_fields={_text_block(s.config_fields.text)}")
    lines = [f"{var} = Ensemble({', '.join(args)})"]
    if s.parameters or s.version_policy is not None:
        messages.append(f"{ensemble.name}/config.pbtxt: parameters/version_policy of the ensemble: conch's "
                        "ensembles take neither; not kept")
    tensors: dict[str, str] = {}
    for t in spec.inputs:
        tensors[t.name] = names(t.name)
        optional = ", optional=True" if t.optional else ""
        lines.append(f"{tensors[t.name]} = {var}.input({_q(t.name)}, {_q(t.dtype.wire)}, {list(t.dims)!r}{optional})")
    outputs = {t.name for t in spec.outputs}
    bound: dict[str, str] = {}
    discarded: list[str] = []
    by_model = {m.name: (v, m) for v, m in steps}
    for st in spec.ensemble_steps:
        if st.model_name not in by_model:
            continue
        step_var, model = by_model[st.model_name]
        missing = [value for _, value in st.input_map if value not in tensors]
        if missing:
            messages.append(f"{ensemble.name}/config.pbtxt: ensemble_scheduling step {st.model_name!r} reads "
                            f"{missing[0]!r} before a step writes it; conch declares steps in the order they run")
            continue
        call = f"{step_var}({', '.join(_keyword(k, tensors[v]) for k, v in st.input_map)})"
        mapped = dict(st.output_map)
        outs = model.read.spec.outputs or _file_outputs(model, messages)
        if not outs:
            continue
        handles = [names(mapped.get(t.name, f"{st.model_name}_{t.name}")) for t in outs]
        named: list[str] = []
        for t, handle in zip(outs, handles, strict=True):
            tensor = mapped.get(t.name)
            if tensor is None:
                discarded.append(handle)
            elif tensor in outputs:
                bound[tensor] = handle
            elif tensor != f"{model.name}.{t.name}":
                named.append(f"{handle}.named({_q(tensor)})")
            if tensor is not None:
                tensors[tensor] = handle
        if len(handles) == 1 and named:  # one output: name it where it is made
            lines.append(f"{handles[0]} = {call}.named({_q(mapped[outs[0].name])})")
        else:
            lines.append(f"{', '.join(handles)} = {call}")
            lines += named
    for t in spec.outputs:
        if t.name in bound:
            lines.append(f"{var}.output({_q(t.name)}, {bound[t.name]})")
        else:
            messages.append(f"{ensemble.name}/config.pbtxt: output {t.name!r}: no step writes it")
    if discarded:
        lines.append(f"{var}.discard({', '.join(discarded)})")
    return lines


def _file_outputs(model: ModelFolder, messages: list[str]) -> tuple[Tensor, ...]:
    """The outputs a model file declares, for a config that leaves them to Triton's auto-complete."""
    import conch

    cls, filename = STEPS[model.platform]
    where = f"{model.name}/config.pbtxt"
    if cls not in _READS_IO or filename is None:
        messages.append(f"{where}: output: not declared, and conch cannot read a {model.platform.value} model's "
                        "outputs from its file; declare them in the config")
        return ()
    path = model.folder / "1" / filename
    try:
        if cls == "TensorRTStep":
            step = conch.TensorRTStep(model.name, plan=path, max_batch_size=model.read.spec.max_batch_size)
        else:
            step = getattr(conch, cls)(model.name, path, max_batch_size=model.read.spec.max_batch_size)
    except conch.ConchError as exc:
        messages.append(f"{where}: output: not declared, and reading them from {model.name}/1/{filename} "
                        f"failed: {exc}")
        return ()
    return tuple(step.outputs)


def _keyword(name: str, value: str) -> str:
    return f"{name}={value}" if name.isidentifier() and not keyword.iskeyword(name) else f"**{{{_q(name)}: {value}}}"
