"""Profiles on conch's own servers: the local tritonserver loaded as SageMaker loads an archive (``triton``),
or the local MME, requests through its SageMaker runtime front (``mme``); metrics on, for the percentiles."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from conch.archive.check_report import CheckReport
from conch.archive.manifest import Manifest
from conch.errors import ConchError, ServeError
from conch.perf.profile.load import Body, Target
from conch.perf.profile.measure import Load, measure
from conch.perf.profile.profile_report import Profile
from conch.perf.profile.server_statistics import METRICS_ARGS, StatsEndpoint
from conch.perf.profile.trace import trace_args
from conch.replays.local_replay import (
    DEFAULT_LOAD_TIMEOUT_S,
    check_backends,
    stage,
    staged_check,
    target_name,
)
from conch.scratch import scratch_temp
from conch.triton.mme import MultiModelClient
from conch.triton.server import LocalTriton, ServerExited, free_port

if TYPE_CHECKING:
    from conch.endpoint.local import LocalMME

MODES = ("triton", "mme")
LoadFor = Callable[[Manifest | None], Load]  # the load to send, once the archive's manifest (samples) is known


def sample_bodies(manifest: Manifest | None) -> tuple[Body, ...]:
    return tuple(Body.of(s.input_arrays()) for s in manifest.samples) if manifest is not None else ()


def _instrumented(triton: LocalTriton) -> tuple[Path, str]:
    """Turn on (before it starts) what a profile reads besides the statistics: the summary metrics for the
    percentiles, and a trace file for one traced request. (trace file, metrics URL)."""
    port = free_port()
    trace_file = triton.workdir / "traces" / "trace.json"
    trace_file.parent.mkdir(parents=True, exist_ok=True)
    triton.extra_args = (*triton.extra_args, *METRICS_ARGS, f"--metrics-port={port}", *trace_args(trace_file))
    triton.extra_ports = (*triton.extra_ports, port)  # reached on the host's 127.0.0.1 from its network namespace
    return trace_file, f"http://127.0.0.1:{port}"


def load_on_mme(mme: LocalMME, archive: Path, progress: Callable[[str], None]) -> Manifest:
    """Load ``archive`` (its TargetModel: its file name) on ``mme``, refused first when a step needs a backend
    the local server lacks (as replay checks it); its manifest."""
    from conch.archive.manifest import read_manifest

    manifest = read_manifest(archive)  # streamed up to the manifest: nothing unpacked
    check_backends(archive, manifest, {}, "profile")
    progress(f"loading {archive.name} on the local MME at {mme.url}")
    mme.load(archive.name)
    return manifest


def load_staged(archive: Path, triton: LocalTriton, client: MultiModelClient, load_timeout: float,
                progress: Callable[[str], None], manifest_needed: bool = True
                ) -> tuple[str, Manifest | None, CheckReport]:
    """Stage ``archive`` on ``triton``, check it, and load it as SageMaker does: (its TargetModel, its manifest
    (None for an archive made by hand when not ``manifest_needed``), its check's report)."""
    name = target_name(archive)
    folder = stage(archive, triton)
    manifest, check = staged_check(archive, folder, manifest_needed)
    check_backends(archive, manifest, check.configs, "profile")
    progress(f"loading {name} on the local tritonserver")
    try:
        client.load(name, folder, load_timeout)
    except ServerExited:
        raise
    except ServeError as exc:
        raise ServeError(f"{exc}\n{triton.log_tail(25)}") from None
    return name, manifest, check


def profile_archives(archives: Sequence[Path], load_for: LoadFor, *, mode: str = "triton",
                     load_timeout: float = DEFAULT_LOAD_TIMEOUT_S, progress: Callable[[str], None] | None = None,
                     on_error: Callable[[Path, ConchError], None] | None = None,
                     manifest_needed: bool = True) -> list[Profile]:
    """Profile each archive on one local server of ``mode``, one after the other. An archive that fails is
    handed to ``on_error`` and the others carry on (without ``on_error`` the error is raised). Without
    ``manifest_needed`` (a --payload is sent) an archive made by hand is profiled too (on ``triton``)."""
    if mode not in MODES:
        raise ServeError(f"mode {mode!r}: choose {' or '.join(MODES)}")
    found = []
    outcomes = (_on_triton(archives, load_for, load_timeout, progress or (lambda _: None), manifest_needed)
                if mode == "triton" else _on_mme(archives, load_for, load_timeout, progress or (lambda _: None)))
    for archive, outcome in outcomes:
        if isinstance(outcome, Profile):
            found.append(outcome)
        elif on_error is None:
            raise outcome
        else:
            on_error(archive, outcome)
    return found


Outcomes = Iterator[tuple[Path, "Profile | ConchError"]]


def _on_triton(archives: Sequence[Path], load_for: LoadFor, load_timeout: float,
               progress: Callable[[str], None], manifest_needed: bool = True) -> Outcomes:
    with profiling_triton(archives) as (triton, stats, trace_file):
        client = MultiModelClient(triton.sagemaker_url, triton.http_url, server=triton)
        for archive in archives:
            if not triton.running():  # it died profiling the last archive (that one's error names it)
                progress("restarting the local tritonserver for the next archive")
                client.close()
                triton.restart()
                client = MultiModelClient(triton.sagemaker_url, triton.http_url, server=triton)
            try:
                name, manifest, check = load_staged(archive, triton, client, load_timeout, progress,
                                                    manifest_needed)
                load = load_for(manifest)
                progress(f"profiling {name}: {load.requests} requests at concurrency {load.concurrency}")
                yield archive, measure(stats, Target.kserve(triton.http_url, name), name, load,
                                       "the local tritonserver", warmup=sample_bodies(manifest) or None,
                                       trace_file=trace_file, alone=check.single is not None)
                client.unload(name)
            except ConchError as exc:
                yield archive, exc


def gather(archives: Sequence[Path], folder: Path) -> None:
    """Copy ``archives`` into ``folder`` for a local MME, where an archive's file name is its TargetModel: two
    different archives of one name are refused (the second would replace the first)."""
    taken: dict[str, Path] = {}
    for archive in archives:
        first = taken.setdefault(archive.name, archive.resolve())
        if first != archive.resolve():
            raise ServeError(f"{archive} and {first} are both named {archive.name!r}, and an archive's name is its "
                             "TargetModel; rename one")
    for archive in archives:
        shutil.copyfile(archive, folder / archive.name)


def _on_mme(archives: Sequence[Path], load_for: LoadFor, load_timeout: float,
            progress: Callable[[str], None]) -> Outcomes:
    with serving_mme(archives, load_timeout, instrumented=True) as (mme, stats, trace_file):
        for archive in archives:
            name = target_name(archive)
            try:
                manifest = load_on_mme(mme, archive, progress)
                load = load_for(manifest)
                progress(f"profiling {name}: {load.requests} requests at concurrency {load.concurrency}")
                yield archive, measure(stats, front_of(mme, name), name, load, f"the local MME ({mme.url})",
                                       warmup=sample_bodies(manifest) or None, trace_file=trace_file)
            except ConchError as exc:
                yield archive, exc


@contextmanager
def serving_mme(archives: Sequence[Path], load_timeout: float, instrumented: bool = False
                ) -> Iterator[tuple[LocalMME, StatsEndpoint, Path | None]]:
    """A local MME over copies of ``archives`` (in a scratch folder, swept by the next run if this one is
    killed), running: (the MME, its tritonserver's statistics, the trace file when ``instrumented``: metrics
    and a trace on, as a profile reads them). Nothing is loaded yet (load_on_mme)."""
    from conch.endpoint import LocalMME
    from conch.triton.stub_python import release_of

    with scratch_temp("conch-mme-") as folder:
        gather(archives, Path(folder))
        mme = LocalMME(folder, load_timeout=load_timeout, release=release_of(archives))
        trace_file, metrics_url = _instrumented(mme.triton) if instrumented else (None, None)
        with mme:
            yield mme, StatsEndpoint(mme.triton.http_url, metrics_url), trace_file


def front_of(mme: LocalMME, name: str) -> Target:
    """Where requests for TargetModel ``name`` go on ``mme``: its SageMaker runtime front."""
    return Target.front(mme.url, mme.endpoint_name, name)


@contextmanager
def profiling_triton(archives: Sequence[Path]) -> Iterator[tuple[LocalTriton, StatsEndpoint, Path]]:
    """A local tritonserver as replay starts one, with its metrics on: replay's archives are profiled on the
    server that replayed them (`conch replay --profile`)."""
    triton = LocalTriton.sized_for(archives)
    trace_file, metrics_url = _instrumented(triton)
    with triton:
        yield triton, StatsEndpoint(triton.http_url, metrics_url), trace_file


def profile_loaded(archive: Path, triton: LocalTriton, stats: StatsEndpoint, load_for: LoadFor,
                   trace_file: Path | None = None) -> Profile:
    """Profile an archive that is loaded on ``triton`` already (under its TargetModel)."""
    from conch.archive.manifest import read_manifest

    name = target_name(archive)
    manifest = read_manifest(triton.workdir / "models" / name.removesuffix(".tar.gz"))
    return measure(stats, Target.kserve(triton.http_url, name), name, load_for(manifest), "the local tritonserver",
                   warmup=sample_bodies(manifest) or None, trace_file=trace_file)
