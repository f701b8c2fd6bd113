"""A production build's Python-backend models judged against the release's image Python before the archive is
written (conch/archive/python_imports.py, the judgement `conch check` gives the archive): code that does not
compile there is refused; each import that neither the image, nor the standard library of its Python, nor the
step's environment provides is named, with its file, line and fix."""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from conch.archive.python_imports import CodeFinding, archive_code, environment_names, judge
from conch.archive.release_check import ENV_PREFIX
from conch.ensembles.layout import FileSource
from conch.ensembles.target import Release
from conch.errors import BuildError
from conch.scratch import scratch_temp


def code_findings(files: Mapping[str, FileSource], models: Mapping[str, str | None], release: Release,
                  ensemble: str) -> list[CodeFinding]:
    """The findings for the Python-backend ``models`` (model folder -> its EXECUTION_ENV_PATH, or None) among the
    archive's ``files`` (path in the archive -> bytes or a file; environments unexpanded). BuildError when code does
    not compile on the release's Python."""
    if not models:
        return []
    with scratch_temp("conch-code-") as tmp:
        root = Path(tmp)
        code = []
        for model, env_value in models.items():
            prefix = f"{model}/"
            for name, source in files.items():
                if not name.startswith(prefix) or name.endswith("/"):
                    continue
                path = root / name
                path.parent.mkdir(parents=True, exist_ok=True)
                if isinstance(source, bytes):
                    path.write_bytes(source)
                elif source.is_file():
                    path.symlink_to(source.resolve())
                else:
                    path.mkdir(exist_ok=True)  # a folder shipped whole: its name is what the stub's sys.path sees
            folder = root / model
            versions = sorted((int(p.name) for p in folder.iterdir() if p.name.isdigit()), reverse=True)[:1]
            laid = archive_code(root, folder, prefix, versions, None)
            if env_value is not None and env_value.startswith(ENV_PREFIX):
                rel = posixpath.normpath(f"{model}/{env_value[len(ENV_PREFIX):]}")
                env = files.get(rel)
                if isinstance(env, Path):
                    names = environment_names(env)
                    if names is None:
                        continue  # an environment conch cannot read: nothing is judged
                    laid = replace(laid, env=names, env_path=rel)
            code.append(laid)
        findings = judge(code, release, left_behind).findings
    refused = [f for f in findings if f.level == "error" and f.message.startswith("does not compile")]
    if refused:
        raise BuildError(f"ensemble {ensemble!r}: " + "; ".join(f"{f.file}: {f.message}" for f in refused))
    return findings


def left_behind(module: str) -> str | None:
    """Where this process finds ``module`` when it is the user's own file outside the installed libraries and the
    standard library: a module conch did not ship, because it is not beside the step's module."""
    import importlib.util
    import sysconfig

    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    origin = spec.origin if spec is not None else None
    if not origin or not Path(origin).is_file():
        return None
    installed = {Path(sysconfig.get_paths()[k]).resolve() for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    path = Path(origin).resolve()
    if any(path.is_relative_to(folder) for folder in installed) or "site-packages" in path.parts:
        return None
    return (f"a module of yours at {path}, which conch cannot ship: it copies only the modules beside the step's "
            "module (and packages there); move it beside the step's module, or make it a package installed "
            "in the step's environment (env=)")
