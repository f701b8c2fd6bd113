"""Replay each archive's sample payloads against a local Triton loaded the way SageMaker MME loads it,
compare with the expected outputs, and report a table."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from conch.archive.extract import safe_extract
from conch.archive.manifest import MANIFEST_NAME, Manifest, read_manifest
from conch.archive.verify import check_folder
from conch.compiler.config_reader import ReadConfig
from conch.ensembles.samples import OutputCheck
from conch.errors import ArchiveError, ConchError, ServeError
from conch.harness.mme import InvokeError, MultiModelClient
from conch.harness.server import LocalTriton
from conch.verdicts import ReplayReport, ReplayRow, judge, not_applicable
from conch.wire import ENDPOINTS, json_refusal

DEFAULT_LOAD_TIMEOUT_S = 300.0
LOCAL_BACKENDS = ("python",)  # what the nvidia-pytriton server carries besides the ensemble scheduler


def stage(archive: Path, triton: LocalTriton) -> Path:
    """Unpack an archive into the server's workspace, as SageMaker unpacks it before ``POST /models``."""
    folder = triton.workdir / "models" / target_name(archive).removesuffix(".tar.gz")
    if folder.exists():
        raise ServeError(f"{archive.name} is given twice (or two archives share its name); each TargetModel is "
                         "loaded once: rename one of them")
    safe_extract(archive, folder)
    return folder


def staged_manifest(archive: Path, folder: Path) -> Manifest:
    """The manifest of a staged archive that passes `conch check`; ServeError saying why not."""
    return _checked(archive, folder)[0]


def _checked(archive: Path, folder: Path) -> tuple[Manifest, dict[str, ReadConfig]]:
    """:func:`staged_manifest`, and each model folder's config as the check parsed it."""
    report = check_folder(folder, archive.name)
    if not report.ok:
        raise ServeError(report.summary())
    if not (folder / MANIFEST_NAME).is_file():
        raise ServeError(f"{archive.name} has no {MANIFEST_NAME}, so no samples to replay; build it with "
                         "`conch build`")
    try:
        return read_manifest(folder), report.configs
    except ArchiveError as exc:
        raise ServeError(str(exc).replace(str(folder), archive.name)) from None


def target_name(archive: Path) -> str:
    """The TargetModel an archive is invoked by: its file name, as an S3 key relative to the prefix."""
    return archive.name


class ReplaySample(Protocol):
    """What a replay sends and judges: a sample the archive carries (its manifest's ``SampleRecord``) or one
    read from a payload folder (``conch.ensembles.payloads.Payload``); either kind of archive."""

    @property
    def name(self) -> str: ...

    @property
    def checks(self) -> Mapping[str, OutputCheck]: ...

    def input_arrays(self) -> dict[str, np.ndarray]: ...

    def expected_arrays(self) -> dict[str, np.ndarray]: ...


#: Where a replay takes an archive's samples from (default: its manifest's).
SampleChooser = Callable[[Path, Manifest], Sequence[ReplaySample]]
#: Hears each answer a replay judged: (the loaded archive, the sample, the endpoint, the outputs).
Listener = Callable[["LoadedArchive", ReplaySample, str, Mapping[str, np.ndarray]], None]


@dataclass(frozen=True)
class LoadedArchive:
    """An archive staged, checked and loaded on a local server, with what its samples' replay needs."""

    archive: Path
    name: str  # the TargetModel
    manifest: Manifest
    sequenced: tuple[str, ...]  # its models with a sequence batcher
    refusal: str | None  # why JSON bodies cannot carry its tensors, if they cannot
    load_ms: float


def replay_archives(
    archives: Sequence[Path],
    *,
    endpoints: Iterable[str] = ENDPOINTS,
    load_timeout: float = DEFAULT_LOAD_TIMEOUT_S,
    server: LocalTriton | None = None,
    progress: Callable[[str], None] | None = None,
    done: Callable[[Path], None] | None = None,
    samples: SampleChooser | None = None,
    heard: Listener | None = None,
) -> ReplayReport:
    """Load every archive into one server (as an MME does) and replay its samples on each endpoint;
    ``done`` hears of each archive once its rows are in (for a progress bar); ``samples`` chooses each
    archive's samples (default: those its manifest carries); ``heard`` hears every answer judged."""
    endpoints = check_endpoints(endpoints)
    report = ReplayReport()
    own = server is None
    if server is None:
        from conch.builder.shm_sizing import archives_settings

        default, growth, _ = archives_settings(archives)  # sized silently: the build warned about production
        server = LocalTriton(shm_default_byte_size=default, shm_growth_byte_size=growth)
    triton = server
    try:
        if own:
            triton.start()
        client = MultiModelClient(triton.sagemaker_url, triton.http_url)
        for archive in archives:
            _replay_one(archive, triton, client, endpoints, load_timeout, report, progress, samples, heard)
            if done:
                done(archive)
    finally:
        if own:
            triton.stop()
    return report


def check_endpoints(endpoints: Iterable[str]) -> tuple[str, ...]:
    """The endpoints as a tuple; ServeError for a name replay does not know."""
    endpoints = tuple(endpoints)
    for e in endpoints:
        if e not in ENDPOINTS:
            raise ServeError(f"unknown endpoint {e!r}: use {', '.join(ENDPOINTS)}")
    return endpoints


def load_archive(
    archive: Path,
    triton: LocalTriton,
    client: MultiModelClient,
    load_timeout: float = DEFAULT_LOAD_TIMEOUT_S,
    progress: Callable[[str], None] | None = None,
) -> LoadedArchive | ReplayRow:
    """Stage, check and load one archive as SageMaker's MME does: the loaded archive, or the failed row
    (endpoint ``check`` or ``load``) saying why it did not load."""
    name = target_name(archive)
    try:
        folder = stage(archive, triton)
        manifest, configs = _checked(archive, folder)
    except ConchError as exc:
        return ReplayRow(name, "-", "check", False, str(exc))
    try:
        lacking = [s for s in manifest.steps if s.served_as not in LOCAL_BACKENDS]
        if lacking:
            names = ", ".join(f"{s.model_name} ({s.served_as})" for s in lacking)
            raise ServeError(
                f"{archive.name} is a {manifest.target} build whose steps {names} need backends the local "
                "server lacks; replay a `conch build --target local` build (same names and I/O, CPU stand-ins)"
            )
        if progress:
            progress(f"loading {name} ({manifest.target} build for {manifest.release})")
        start = time.perf_counter()
        client.load(name, folder, load_timeout)
        load_ms = (time.perf_counter() - start) * 1000
    except ConchError as exc:
        return ReplayRow(name, "-", "load", False, f"{exc}\n{triton.log_tail(25)}")
    return LoadedArchive(archive, name, manifest, tuple(_sequence_batched(configs)),
                         json_refusal(manifest.schema.tensors()), load_ms)


def _replay_one(
    archive: Path,
    triton: LocalTriton,
    client: MultiModelClient,
    endpoints: tuple[str, ...],
    load_timeout: float,
    report: ReplayReport,
    progress: Callable[[str], None] | None,
    samples: SampleChooser | None = None,
    heard: Listener | None = None,
) -> None:
    loaded = load_archive(archive, triton, client, load_timeout, progress)
    if isinstance(loaded, ReplayRow):
        report.rows.append(loaded)
        return
    name = loaded.name
    report.rows.append(ReplayRow(name, "-", "load", True, "loaded via POST /models", loaded.load_ms))
    chosen = samples(archive, loaded.manifest) if samples else loaded.manifest.samples
    if not chosen:
        report.rows.append(ReplayRow(name, "-", "-", False, "the archive has no samples to replay"))
    for sample in chosen:
        for endpoint in endpoints:
            row = replay_sample(client, loaded, sample, endpoint, heard)
            report.rows.append(row)
            if progress:
                progress(_short(row))


def replay_sample(
    client: MultiModelClient,
    loaded: LoadedArchive,
    sample: ReplaySample,
    endpoint: str,
    heard: Listener | None = None,
) -> ReplayRow:
    """One sample of a loaded archive sent through one endpoint and judged (n/a where the endpoint cannot
    carry it); ``heard`` hears the answer before it is judged."""
    if endpoint == "sagemaker-json" and loaded.refusal:
        return not_applicable(loaded.name, sample.name, endpoint, loaded.refusal)
    answer: list[Mapping[str, np.ndarray]] = []
    row = _replay_sample(client, loaded.name, sample.name, endpoint, sample.input_arrays(), sample.expected_arrays(),
                         sample.checks, loaded.sequenced, answer)
    if loaded.sequenced:
        row.detail += f" (sent as a sequence of one: {', '.join(loaded.sequenced)} has a sequence batcher)"
    if heard and answer:
        heard(loaded, sample, endpoint, answer[0])
    return row


def _sequence_batched(configs: Mapping[str, ReadConfig]) -> list[str]:
    """The models of a staged archive (``configs``: as its check parsed them) whose config has a sequence
    batcher, in the order of their config files' paths."""
    return [name for name, config in sorted(configs.items(), key=lambda item: f"{item[0]}/")
            if config.carried.HasField("sequence_batching")]  # not modelled: carried


def _short(row: ReplayRow) -> str:
    return f"{row.ensemble} {row.sample} {row.endpoint}: {row.result} {row.detail.splitlines()[0]}"


def _replay_sample(
    client: MultiModelClient,
    name: str,
    sample: str,
    endpoint: str,
    inputs: dict[str, np.ndarray],
    expected: dict[str, np.ndarray],
    checks: Mapping[str, OutputCheck],
    sequenced: Sequence[str] = (),
    answer: list[Mapping[str, np.ndarray]] | None = None,
) -> ReplayRow:
    call: Callable[..., dict[str, Any]] = {
        "kserve": client.invoke_kserve,
        "sagemaker-json": client.invoke_json,
        "sagemaker-binary": client.invoke_binary,
    }[endpoint]
    start = time.perf_counter()
    try:
        # a model with a sequence batcher refuses a request without a correlation ID, in production too:
        # the replay sends each sample as a sequence of one, as a client of such an ensemble must
        got = call(name, inputs, sequence_id=1) if sequenced else call(name, inputs)
    except InvokeError as exc:
        return ReplayRow(name, sample, endpoint, False, f"server error: {exc}")
    except ConchError as exc:
        return ReplayRow(name, sample, endpoint, False, str(exc))
    millis = (time.perf_counter() - start) * 1000
    if answer is not None:
        answer.append(got)
    return judge(name, sample, endpoint, got, expected, checks, millis)
