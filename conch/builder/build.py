"""Build one ensemble: check, render every config, lay out the models, write a deterministic MME tarball."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conch import __version__
from conch.builder.archive import atomic_output, expand, write_tar
from conch.builder.envs import EnvLayout
from conch.builder.manifest import FORMAT, MANIFEST_NAME, dumps, sha256
from conch.builder.observe import observe
from conch.builder.pack import Progress
from conch.builder.render import render_config
from conch.builder.shm import plan_shm
from conch.ensembles.ensemble import Ensemble
from conch.ensembles.samples import encode_array
from conch.ensembles.step import FileSource
from conch.ensembles.target import Release, Target
from conch.errors import BuildError, ConchError


@dataclass
class Repository:
    """A rendered model repository for one ensemble, still in memory: path in archive -> content."""

    ensemble: str
    files: dict[str, FileSource]
    manifest: dict[str, Any]
    notes: list[str] = field(default_factory=list)


def render_repository(
    ensemble: Ensemble, target: Target | str, release: Release | str, progress: Progress | None = None
) -> Repository:
    """Everything the archive holds, checked; nothing is written (environments are packed into the cache)."""
    target, release = Target.of(target), Release.of(release)
    ensemble.validate()
    files: dict[str, FileSource] = {}
    steps: list[dict[str, Any]] = []
    notes: list[str] = []
    envs = EnvLayout(target, release, progress)
    observed = observe(ensemble, target, release)  # runs in-process only for a warmup or to size shm
    for call in ensemble.calls:
        step = call.step
        model = ensemble.model_name(step)
        try:
            step.check(release)
            layout = step.layout(model, target, release, ensemble.name)
            env = ensemble.env_of(step)
            spec = layout.spec if env is None else envs.attach(env, layout.spec)
        except ConchError as exc:
            raise type(exc)(f"ensemble {ensemble.name!r}: {exc}") from exc
        if spec.name != model:
            raise BuildError(f"step {step.name!r} laid out model {spec.name!r}, expected {model!r}")
        spec = observed.warmup.attach(model, spec, files)
        files[f"{model}/config.pbtxt"] = render_config(spec).encode()
        for rel, source in layout.files.items():
            files[f"{model}/{rel}"] = source
        notes.extend(layout.notes)
        served = spec.platform or spec.backend
        steps.append({**step.describe(), "model_name": model, "served_as": served})
    python_models = [s["model_name"] for s in steps if s["served_as"] == "python"]
    shm = plan_shm(ensemble, python_models, observed.row_bytes, observed.unmeasured)
    notes.extend(shm.warn(ensemble.name, progress))
    files[f"{ensemble.name}/config.pbtxt"] = render_config(ensemble.spec()).encode()
    files[f"{ensemble.name}/1/"] = b""  # Triton needs the ensemble's (empty) version folder
    files.update(envs.files)
    files = expand(files)
    manifest = {
        "format": FORMAT,
        "conch_version": __version__,
        "ensemble": ensemble.name,
        "description": ensemble.description,
        "target": target.value,
        "release": str(release),
        "stub_python": release.stub_python,
        "schema": ensemble.schema(),
        "steps": steps,
        "notes": notes,
        "environments": envs.manifest,
        "files": {name: sha256(src) for name, src in sorted(files.items()) if not name.endswith("/")},
        "samples": _samples(ensemble),
        "warmup": observed.warmup.manifest(),
        "shm": shm.manifest(),
    }
    files[MANIFEST_NAME] = dumps(manifest)
    return Repository(ensemble.name, files, manifest, notes)


def _samples(ensemble: Ensemble) -> list[dict[str, Any]]:
    inputs = {t.name: t.dtype for t in ensemble.input_specs()}
    outputs = {t.name: t.dtype for t in ensemble.output_specs()}
    out = []
    for sample in ensemble.samples:
        where = f"ensemble {ensemble.name!r} sample {sample.name!r}"
        try:
            expected = sample.expected_arrays()
        except ConchError:
            raise
        except Exception as exc:
            raise BuildError(f"{where}: computing its expected outputs failed: {exc!r}") from exc
        unknown = sorted(set(expected) - set(outputs))
        if unknown:
            raise BuildError(f"{where}: expects outputs {unknown}, but the ensemble outputs {sorted(outputs)}")
        out.append(
            {
                "name": sample.name,
                "inputs": {k: encode_array(v, inputs[k]) for k, v in sample.inputs.items()},
                "expected": {k: encode_array(v, outputs[k]) for k, v in expected.items()},
                "tolerance": sample.tolerance.to_json(),
            }
        )
    return out


def build_ensemble(
    ensemble: Ensemble,
    out_dir: Path,
    target: Target | str = Target.PRODUCTION,
    release: Release | str = "",
    progress: Progress | None = None,
) -> Path:
    """Write ``<out_dir>/<ensemble>.tar.gz``; on any failure no (partial) tarball is left behind."""
    from conch.ensembles.target import DEFAULT_RELEASE

    return write_archive(render_repository(ensemble, target, release or DEFAULT_RELEASE, progress), out_dir)


def write_archive(repo: Repository, out_dir: Path) -> Path:
    """Write a rendered repository as ``<out_dir>/<ensemble>.tar.gz``, atomically."""
    path = Path(out_dir) / f"{repo.ensemble}.tar.gz"
    with atomic_output(path) as fh:
        write_tar(repo.files, fh)
    return path


def write_repository(repo: Repository, dest: Path) -> Path:
    """Lay the repository out as folders (for inspection or a plain `tritonserver --model-repository`)."""
    from conch.builder.archive import write_bytes_atomic

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
