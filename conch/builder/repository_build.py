"""One ensemble's model repository: its compiled plan rendered (configs, model files, environments, warmup,
shared memory, samples, manifest) and written as a deterministic MME tarball."""

from __future__ import annotations

import warnings
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conch.archive.manifest import MANIFEST_NAME, Manifest, SampleRecord, Schema, StepRecord, dumps, sha256
from conch.atomic_write import atomic_output
from conch.builder.archive import expand, write_tar
from conch.builder.buildcache import BuildRecord, Digests, entry_mode
from conch.builder.capture import CapturedOutput, captured, summary
from conch.builder.code_check import code_findings
from conch.builder.envs import EnvLayout
from conch.builder.observe import observe
from conch.builder.pack import Progress
from conch.builder.shm_sizing import plan_shm
from conch.cache import code_identity, key_of, pure_key, refreshing, remembered
from conch.compiler.compiled import CompiledEnsemble, LayoutChecker, compile_ensemble, describe_step
from conch.compiler.pbtxt import render_config
from conch.ensembles.ensemble import Ensemble
from conch.ensembles.layout import FileSource, Platform, StepLayout
from conch.ensembles.samples import Sample, TopK, encode_array
from conch.ensembles.step import Step
from conch.ensembles.target import DEFAULT_RELEASE, Release, Target
from conch.errors import BuildError, ConchError
from conch.version import __version__
from conch.wire import json_refusal


@dataclass
class Repository:
    """A rendered model repository for one ensemble, still in memory: path in archive -> content."""

    ensemble: str
    files: dict[str, FileSource]
    record: Manifest
    notes: list[str] = field(default_factory=list)
    # what user and third-party code said while the build ran it (not in the archive: it is not reproducible)
    output: list[CapturedOutput] = field(default_factory=list)

    @property
    def manifest(self) -> dict[str, Any]:
        """The manifest in the JSON form the archive holds."""
        return self.record.to_json()


def render_repository(
    ensemble: Ensemble,
    target: Target | str,
    release: Release | str,
    progress: Progress | None = None,
    refresh: bool = False,
) -> Repository:
    """Everything the archive holds, checked; nothing is written (environments are packed into the cache).

    Environment pins and sample expected outputs come from the cache when their inputs are unchanged;
    ``refresh`` asks the package index and recomputes the expected outputs."""
    return repository_build(ensemble, target, release, progress, refresh).render()


def repository_build(
    ensemble: Ensemble,
    target: Target | str,
    release: Release | str,
    progress: Progress | None = None,
    refresh: bool = False,
) -> RepositoryBuild:
    """The build of a declaration, compiled once here: validated, every step laid out and checked (what a
    step's export says is kept in the build's output)."""
    output: list[CapturedOutput] = []
    digests = Digests()
    with refreshing(refresh):  # what backends remember of steps (bindings, DALI pipelines) is derived again
        plan = compile_ensemble(ensemble, target, release, _checker(output, digests))
    return RepositoryBuild(plan, progress, refresh, output, digests)


@dataclass
class RepositoryBuild:
    """One build of a compiled ensemble: the plan, where its messages go, whether the cached environments
    and expected outputs are asked again, and what the ensemble's code said while the build ran it."""

    plan: CompiledEnsemble
    progress: Progress | None = None
    refresh: bool = False
    output: list[CapturedOutput] = field(default_factory=list)
    digests: Digests = field(default_factory=Digests)  # each in-memory file hashed once in the build

    def render(self) -> Repository:
        """The repository of the plan (see render_repository); ``refresh`` covers what backends remember of
        steps too, for the local plan the in-process run lays out."""
        with refreshing(self.refresh):
            return self._render()

    def _render(self) -> Repository:
        plan, progress, output = self.plan, self.progress, self.output
        target, release = plan.target, plan.release
        files: dict[str, FileSource] = {}
        steps: list[StepRecord] = []
        notes: list[str] = []
        envs = EnvLayout(target, release, progress, self.refresh)
        alone = plan.plain_model
        notes.extend(_unkeyed(plan, progress))
        python_code: dict[str, str | None] = {}  # production's Python-backend models -> their EXECUTION_ENV_PATH
        with captured("running the ensemble in this process", output):
            observed = observe(plan, self.refresh, self.digests)  # in-process for a warmup or shm, once
        _say_once(observed.python_note, progress)
        for step in plan.steps:
            model, layout = step.model_name, step.layout
            try:
                spec = layout.spec if step.env is None else envs.attach(step.env, layout.spec)
            except ConchError as exc:
                exc.within(f"ensemble {plan.name!r}")
                raise
            spec = observed.warmup.attach(model, spec, files)
            if alone is not None:
                spec = envs.within_model_folder(spec)
            files[f"{model}/config.pbtxt"] = render_config(spec).encode()
            for rel, source in layout.files.items():
                files[_in_archive(model, rel)] = source
            notes.extend(layout.notes)
            steps.append(StepRecord(model, str(spec.platform or spec.backend), step.summary()))
            if target is Target.PRODUCTION and step.python_in_production:
                python_code[model] = spec.settings.parameters.get("EXECUTION_ENV_PATH")
        python_models = [s.model_name for s in steps if s.served_as == Platform.PYTHON]
        shm = plan_shm(plan, python_models, observed.row_bytes, observed.unmeasured)
        # the warning is about production, whatever the target: a local build's stand-ins all run on the Python
        # backend, but only the steps that are Python models in production need SageMaker's setting changed
        production = [s.model_name for s in plan.steps if s.python_in_production]
        warned = shm if target is Target.PRODUCTION else plan_shm(plan, production, observed.row_bytes,
                                                                  observed.unmeasured)
        notes.extend(warned.warn(plan.name, progress))
        schema = Schema.of(plan.max_batch_size, plan.inputs, plan.outputs)
        refusal = json_refusal(schema.tensors())
        if refusal:
            notes.append(f"ensemble {plan.name!r} needs binary bodies: {refusal}")
            if progress:
                progress(f"warning: {notes[-1]}")
        notes.extend(_shape_note(plan))
        if alone is None:
            files[f"{plan.name}/config.pbtxt"] = render_config(plan.spec).encode()
            files[f"{plan.name}/1/"] = b""  # Triton needs the ensemble's (empty) version folder
            files.update(envs.files)
        else:  # the archive's one folder: its environment inside it
            files.update({f"{alone.model_name}/{rel}": source for rel, source in envs.files.items()})
        for finding in code_findings(files, python_code, release, plan.name):
            notes.append(f"{finding.file}: {finding.message}")
            if progress:
                progress(f"warning: {notes[-1]}")
        files = expand(files)
        hashes = {name: self.digests(src) for name, src in sorted(files.items()) if not name.endswith("/")}
        manifest = Manifest(
            ensemble=plan.name,
            target=target.value,
            release=str(release),
            stub_python=release.stub_python,
            schema=schema,
            steps=tuple(steps),
            description=plan.description,
            conch_version=__version__,
            notes=tuple(notes),
            environments={f"{alone.model_name}/{k}" if alone else k: v for k, v in envs.manifest.items()},
            files=hashes,
            warmup=observed.warmup.record(),
            shm=shm.record(),
            # the files' digests cover every config, model and code file of the archive
            samples=self._samples(key_of([target.value, str(release), hashes])),
        )
        files[MANIFEST_NAME] = dumps(manifest)
        return Repository(plan.name, files, manifest, notes, output)

    def _samples(self, models_key: str) -> tuple[SampleRecord, ...]:
        """Each sample with its expected outputs: a function's computed at every build, or, for a sample
        declared ``pure=True``, once per content of the models (``models_key`` covers every file of the
        archive), the sample, the function's code and the installed distributions."""
        plan, output = self.plan, self.output
        inputs = {t.name: t.dtype for t in plan.inputs}
        outputs = {t.name: t.dtype for t in plan.outputs}
        out = []
        for sample in plan.samples:
            where = f"ensemble {plan.name!r} sample {sample.name!r}"
            encoded_inputs = {k: encode_array(v, inputs[k]) for k, v in sample.inputs.items()}

            def compute(sample: Sample = sample, where: str = where) -> dict[str, Any]:
                said = f"the expected outputs of sample {sample.name!r}"  # only a function runs user code
                try:
                    with captured(said, output) if callable(sample.expected) else nullcontext():
                        expected = sample.expected_arrays()
                except ConchError as exc:
                    exc.within(f"ensemble {plan.name!r}")
                    raise
                except Exception as exc:
                    raise BuildError(f"{where}: computing its expected outputs failed: {exc!r}") from exc
                unknown = sorted(set(expected) - set(outputs))
                if unknown:
                    raise BuildError(f"{where}: expects outputs {unknown}, but the ensemble outputs {sorted(outputs)}")
                return {k: encode_array(v, outputs[k]) for k, v in expected.items()}

            # a function declared pure and told by content: its outputs are remembered; any other runs every time
            code = pure_key(sample.expected) if sample.pure and callable(sample.expected) else None
            if code is not None:
                expected = remembered("samples", [models_key, sample.name, encoded_inputs, code], compute)
            else:
                expected = compute()
            checks = {k: sample.check_for(k, outputs[k]) for k in expected}
            for name, check in checks.items():  # a variable class axis is only known from the expected value
                if isinstance(check, TopK):
                    check.fits(expected[name]["shape"][-1] if expected[name]["shape"] else 0,
                               f"{where}, output {name!r} (expected shape {expected[name]['shape']})")
            out.append(SampleRecord(sample.name, encoded_inputs, expected, checks))
        return tuple(out)


_said: set[str] = set()  # what a build says once per process, not once per ensemble


def _say_once(note: str, progress: Progress | None) -> None:
    if not note or note in _said:
        return
    _said.add(note)
    if progress is not None:
        progress(f"warning: {note}")
    else:
        warnings.warn(f"conch: {note}", RuntimeWarning, stacklevel=3)


def _unkeyed(plan: CompiledEnsemble, progress: Progress | None) -> list[str]:
    """A note (and a warning line) for each step and sample declared pure whose code conch cannot key by content
    (``cache.code_identity``): it runs at every build, and the build says so once, naming it."""
    found: list[tuple[str, Any]] = [(f"step {s.step.name!r}", s.step.pure_code()) for s in plan.steps]
    found += [(f"sample {s.name!r}", s.expected) for s in plan.samples if s.pure and callable(s.expected)]
    notes = []
    for what, code in found:
        why = "" if code is None else code_identity(code)[1]
        if why:
            notes.append(f"ensemble {plan.name!r} {what}: declared pure=True, but conch cannot key its code by "
                         f"content: {why}; it runs at every build")
            if progress:
                progress(f"warning: {notes[-1]}")
    return notes


def _shape_note(plan: CompiledEnsemble) -> list[str]:
    """What a DAG of one step that is written as the model alone became (a one-step DAG that keeps its
    ensemble is built as before, and says nothing: `CompiledEnsemble.kept_because` says why)."""
    alone = plan.plain_model
    if alone is None:
        return []
    return [f"ensemble {plan.name!r} has one step: built as model {alone.model_name!r} alone (a single-model "
            "archive, served as the TargetModel without the ensemble scheduler's hop); Ensemble(..., "
            "keep_ensemble=True) keeps the ensemble"]


def _in_archive(model: str, rel: str) -> str:
    """A step's file in the archive: in its model folder, or beside the model folders for ``../<path>``
    (a hand-written Python model's environment shared by several models)."""
    if rel.startswith("../"):
        inner = rel[3:]
        if not inner or inner.startswith(("/", "../")) or "/../" in inner:
            raise BuildError(f"model {model!r}: file {rel!r} leaves the archive; keep files inside it")
        return inner
    return f"{model}/{rel}"


def _checker(output: list[CapturedOutput], digests: Digests) -> LayoutChecker:
    """How a build lays out and checks a step: what the step's code says is kept in ``output``."""

    def checked(step: Step, model: str, target: Target, release: Release, ensemble: str) -> StepLayout:
        if not step.lays_out_with_code:  # nothing to capture
            return _checked_layout(step, model, target, release, ensemble, digests)
        with captured(f"the export of step {step.name!r}", output):
            return _checked_layout(step, model, target, release, ensemble, digests)

    return checked


def _checked_layout(step: Step, model: str, target: Target, release: Release, ensemble: str,
                    digests: Digests) -> StepLayout:
    """The step's layout, after its build-time checks. Checks that passed for the same declaration,
    config, files and release are not run again (but under ``--refresh``): they read or run the artifacts
    (0.3 s for a 90 MB ONNX file) and depend on nothing else."""
    try:
        layout = step.layout(model, target, release, ensemble)
    except Exception:
        step.check(release)  # layouts may assume checked declarations: the check names the cause
        raise
    try:
        contents = {rel: digests(src) for rel, src in expand(layout.files).items() if not rel.endswith("/")}
    except OSError as exc:
        step.check(release)
        raise BuildError(f"step {step.name!r}: cannot read a file it lays out: {exc}") from exc
    material = [type(step).__module__, type(step).__qualname__, describe_step(step), step.check_settings(),
                repr(layout.spec), str(release), contents]

    def check() -> bool:  # conch's code run on those files through the libraries installed (onnx, torch, DALI)
        step.check(release)
        return True

    remembered("checks", material, check)  # its key adds conch's code and the installed distributions
    return layout


def build_ensemble(
    ensemble: Ensemble,
    out_dir: Path,
    target: Target | str = Target.PRODUCTION,
    release: Release | str = DEFAULT_RELEASE,
    progress: Progress | None = None,
) -> Path:
    """Write ``<out_dir>/<ensemble>.tar.gz``; on any failure no (partial) tarball is left behind. What the
    ensemble's code said while it ran is summed up in one line through ``progress``."""
    repo = repository_build(ensemble, target, release or DEFAULT_RELEASE, progress).render()
    line = summary(repo.ensemble, repo.output)
    if progress is not None and line:
        progress(line.replace("; -v shows them", "; `conch build -v` shows them"))
    return write_archive(repo, out_dir)


def build_key(repo: Repository) -> str:
    """Everything the archive's bytes depend on: the manifest (every file's content digest, the
    release, the environments, the samples) and each entry's name and mode."""
    modes = [entry_mode(name, src) for name, src in sorted(repo.files.items())]
    return key_of([sha256(repo.files[MANIFEST_NAME]), modes])


def write_if_changed(repo: Repository, out_dir: Path) -> tuple[Path, bool]:
    """``(archive, written)``: the archive is left untouched (same inode and mtime) when it is the one
    this repository would be written as, according to its build record."""
    path = Path(out_dir) / f"{repo.ensemble}.tar.gz"
    record = BuildRecord(path)
    key = build_key(repo)
    if record.matches(key):
        return path, False
    write_archive(repo, out_dir)
    record.save(key)
    return path, True


def write_archive(repo: Repository, out_dir: Path) -> Path:
    """Write a rendered repository as ``<out_dir>/<ensemble>.tar.gz``, atomically."""
    path = Path(out_dir) / f"{repo.ensemble}.tar.gz"
    with atomic_output(path) as fh:
        write_tar(repo.files, fh)
    return path


def write_repository(repo: Repository, dest: Path) -> Path:
    """Lay the repository out as folders (for inspection or a plain `tritonserver --model-repository`)."""
    from conch.atomic_write import write_bytes_atomic

    for name, source in sorted(repo.files.items()):
        target = dest / name
        if name.endswith("/"):
            target.mkdir(parents=True, exist_ok=True)
            continue
        data = source if isinstance(source, bytes) else Path(source).read_bytes()
        write_bytes_atomic(target, data)
        if isinstance(source, Path) and source.stat().st_mode & 0o100:
            target.chmod(0o755)
    return dest
