"""Replay each archive's sample payloads against a local Triton loaded the way SageMaker MME loads it,
compare with the expected outputs, and report a table."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from conch.archive.check_report import CheckReport
from conch.archive.extract import safe_extract
from conch.archive.fleet_check import ArchiveModels
from conch.archive.manifest import MANIFEST_NAME, Manifest, read_manifest
from conch.archive.verify import ROOT_MODEL, check_folder
from conch.compiler.config_reader import ReadConfig
from conch.ensembles.backends_table import WHEEL_BACKENDS
from conch.ensembles.samples import OutputCheck, Tolerance
from conch.ensembles.target import Release
from conch.errors import ArchiveError, ConchError, ServeError, ServerExited
from conch.triton.mme import InvokeError, MultiModelClient
from conch.triton.mme_contract import root_model_staged
from conch.triton.server import LocalTriton
from conch.triton.stub_python import StubPython, group_by_python, releases_of, strict_default
from conch.verdicts import PYTHON_ROW, ReplayReport, ReplayRow, judge, not_applicable
from conch.wire import ENDPOINTS, json_refusal

DEFAULT_LOAD_TIMEOUT_S = 300.0


def stage(archive: Path, triton: LocalTriton, name: str | None = None) -> Path:
    """Unpack an archive into the server's workspace, as SageMaker unpacks it before ``POST /models`` (``name``:
    its TargetModel, when not its file name)."""
    folder = triton.workdir / "models" / (name or target_name(archive)).removesuffix(".tar.gz")
    if folder.exists():
        raise ServeError(f"{name or archive.name} is given twice (or two archives share its name); each TargetModel "
                         "is loaded once: rename one of them")
    safe_extract(archive, folder)
    return root_model_staged(folder)


def _manifest_of(folder: Path) -> Path:
    """Where a staged archive's manifest is (inside ``model/`` for an archive with a root config.pbtxt)."""
    return folder / MANIFEST_NAME if (folder / MANIFEST_NAME).is_file() else folder / ROOT_MODEL / MANIFEST_NAME


def staged_check(archive: Path, folder: Path, manifest_needed: bool = True) -> tuple[Manifest | None, CheckReport]:
    """The manifest of a staged archive that passes `conch check` (None for one without, when samples come from
    elsewhere: not ``manifest_needed``), and the check's report (each model folder's config as it parsed it);
    ServeError saying why not."""
    report = check_folder(folder, archive.name)
    if not report.ok:
        raise ServeError(report.summary())
    manifest = _manifest_of(folder)
    if not manifest.is_file():
        if not manifest_needed:
            return None, report
        raise ServeError(f"{archive.name} has no {MANIFEST_NAME}, so no samples to replay; give --payload FILE (a "
                         "KServe v2 JSON request, or the samples file `conch import` writes), or build it with "
                         "`conch build`")
    try:
        return read_manifest(manifest.parent), report
    except ArchiveError as exc:
        raise ServeError(str(exc).replace(str(folder), archive.name)) from None


def target_name(archive: Path) -> str:
    """The TargetModel an archive is invoked by: its file name, as an S3 key relative to the prefix."""
    return archive.name


class ReplaySample(Protocol):
    """What a replay sends and judges: a sample the archive carries (its manifest's ``SampleRecord``) or one
    read from a payload folder or a ``--payload`` file (``conch.ensembles.payloads.Payload``); either kind of
    archive."""

    @property
    def name(self) -> str: ...

    @property
    def checks(self) -> Mapping[str, OutputCheck]: ...

    def input_arrays(self) -> dict[str, np.ndarray]: ...

    def expected_arrays(self) -> dict[str, np.ndarray]: ...


#: Where a replay takes an archive's samples from (default: its manifest's).
SampleChooser = Callable[[Path, Manifest | None], Sequence[ReplaySample]]
#: Hears each answer a replay judged: (the loaded archive, the sample, the endpoint, the outputs).
Listener = Callable[["LoadedArchive", ReplaySample, str, Mapping[str, np.ndarray]], None]


@dataclass(frozen=True)
class LoadedArchive:
    """An archive staged, checked and loaded on a local server, with what its samples' replay needs."""

    archive: Path
    name: str  # the TargetModel
    manifest: Manifest | None  # None: an archive made by hand, replayed with payloads given
    sequenced: tuple[str, ...]  # its models with a sequence batcher
    refusal: str | None  # why JSON bodies cannot carry its tensors, if they cannot
    load_ms: float
    served: ReadConfig | None = None  # the served model's config (the ensemble, or the single model)


@dataclass
class FirstAnswer:
    """The first endpoint's answer to a sample that expects nothing (a bare KServe v2 request given as
    ``--payload``): the endpoints after it must answer the same."""

    endpoint: str = ""
    outputs: dict[str, np.ndarray] | None = field(default=None)


def replay_archives(
    archives: Sequence[Path],
    *,
    endpoints: str | Iterable[str] = ENDPOINTS,
    load_timeout: float = DEFAULT_LOAD_TIMEOUT_S,
    server: LocalTriton | None = None,
    progress: Callable[[str], None] | None = None,
    done: Callable[[Path], None] | None = None,
    samples: SampleChooser | None = None,
    heard: Listener | None = None,
    payloads: Sequence[ReplaySample] | None = None,
    live: Callable[[str], None] | None = None,
    strict: bool | None = None,
) -> ReplayReport:
    """Load every archive into one server (as an MME does; one server per image Python: archives of releases
    whose images run different Pythons load on separate servers) and replay its samples on each endpoint;
    ``progress`` hears what is being done (an archive loading); ``live`` hears each row as a line when it is in;
    ``done`` hears of each archive once its rows are in (for a progress bar); ``samples`` chooses each
    archive's samples (default: those its manifest carries; ``payloads``: these for every archive);
    ``heard`` hears every answer judged. An archive whose Python steps ran on another Python than its image's
    gets a ``python`` row saying so, failed when ``strict`` (default: in CI)."""
    endpoints = check_endpoints(endpoints)
    strict = strict_default() if strict is None else strict
    releases = releases_of(archives)
    groups = group_by_python(dict(zip(map(str, archives), releases, strict=True)))
    if server is None and len(groups) > 1:  # one server per Python, as each image runs one
        report = ReplayReport()
        for paths in groups.values():
            part = replay_archives(
                [Path(p) for p in paths], endpoints=endpoints, load_timeout=load_timeout, progress=progress,
                done=done, samples=samples, heard=heard, payloads=payloads, live=live, strict=strict)
            report.rows += part.rows
            report.restarts += part.restarts
        return report
    report = ReplayReport()
    own = server is None
    triton = LocalTriton.sized_for(archives, strict=False) if server is None else server  # strict: the rows fail
    release_of = dict(zip(archives, releases, strict=True))
    held: list[ArchiveModels] = []  # the archives loaded so far: their step names are taken
    try:
        if own:
            triton.start()
        client = MultiModelClient(triton.sagemaker_url, triton.http_url, server=triton)
        death: ServeError | None = None
        for index, archive in enumerate(archives):  # each loaded beside those ``held``, replayed into ``report``
            if not triton.running():  # it died in the last archive, or since: named, restarted, counted
                try:
                    client = _restarted(triton, client, report, held,
                                        death or triton.lost("idle between archives"), progress)
                except ServeError as exc:
                    report.rows += [ReplayRow(target_name(a), "-", "load", False, "not replayed: tritonserver did "
                                              f"not start again: {_first_line(exc)}") for a in archives[index:]]
                    break
            name = target_name(archive)
            loaded = load_archive(archive, triton, client, load_timeout, progress,
                                  manifest_needed=samples is None and payloads is None, held=held)
            death = triton.lost(f"loading {name!r}")
            if isinstance(loaded, ReplayRow):
                report.rows.append(loaded)
            else:
                report.rows.append(ReplayRow(name, "-", "load", True, "loaded via POST /models", loaded.load_ms))
                python = python_row(name, triton.stub, release_of[archive], strict)
                if python is not None:
                    report.rows.append(python)
                    if live:
                        live(_short(python))
                chosen = (samples(archive, loaded.manifest) if samples else payloads if payloads is not None
                          else loaded.manifest.samples if loaded.manifest else ())
                if not chosen:
                    report.rows.append(ReplayRow(name, "-", "-", False, "the archive has no samples to replay"))
                for sample in chosen:
                    first = FirstAnswer()
                    for endpoint in endpoints:
                        row = (ReplayRow(name, sample.name, endpoint, False, f"not sent: {_first_line(death)}")
                               if death else replay_sample(client, loaded, sample, endpoint, heard, first))
                        report.rows.append(row)
                        death = death or triton.lost(f"invoking {name!r}")
                        if live:
                            live(_short(row))
            if done:
                done(archive)
    finally:
        if own:
            triton.stop()
    return report


def _restarted(triton: LocalTriton, client: MultiModelClient, report: ReplayReport, held: list[ArchiveModels],
               death: ServeError | None, progress: Callable[[str], None] | None = None) -> MultiModelClient:
    """Start the server that died again (every archive unloaded: ``held`` emptied), count the restart in
    ``report``, and return a client of the new server; ServeError when it does not start."""
    why = _first_line(death) if death is not None else "tritonserver exited"
    report.restarts.append(why)
    if progress:
        progress(f"{why}; restarting it (a SageMaker container would not come back this way: counted)")
    client.close()
    held.clear()
    triton.restart()
    return MultiModelClient(triton.sagemaker_url, triton.http_url, server=triton)


def python_row(name: str, stub: StubPython, release: str, strict: bool) -> ReplayRow | None:
    """The row of an archive whose Python-backend stubs ran on another Python than its release's image runs
    (None when they ran on that one): passed unless ``strict``, and never silent."""
    wanted = Release.of(release).stub_python
    if stub.version == wanted:
        return None
    why = stub.note if stub.wanted == wanted else (f"ran on {stub.version}; the {release} image runs {wanted} (the "
                                                   "server was started for another release)")
    return ReplayRow(name, "-", PYTHON_ROW, not strict, why + ("" if strict else "; --strict (and CI) fail on it"))


def check_endpoints(endpoints: str | Iterable[str]) -> tuple[str, ...]:
    """The endpoints as a tuple (one name alone is one endpoint); ServeError for a name replay does not know."""
    endpoints = (endpoints,) if isinstance(endpoints, str) else tuple(endpoints)
    for e in endpoints:
        if e not in ENDPOINTS:
            raise ServeError(f"unknown endpoint {e!r}: use {', '.join(ENDPOINTS)}")
    return endpoints


def fleet_clash(models: ArchiveModels, held: Sequence[ArchiveModels]) -> str | None:
    """Why an archive (``models``: what the fleet check reads of it) cannot load beside the archives ``held``
    (loaded before it on one server), or None: step model names another archive holds, in `conch check`'s words
    (without this, Triton's raw error, e.g. "ensemble tensor IN0: inconsistent data type"). The first holder of
    the names loads; the others do not."""
    from conch.archive.fleet_check import check_fleet

    if not held:
        return None
    for finding in check_fleet([*held, models]).errors:
        if finding.kind == "shared-step-names" and models.target_model in finding.archives[1:]:
            return f"fleet: {finding.message} (not loaded: {finding.archives[0]} holds them and loaded first)"
    return None


def load_archive(
    archive: Path,
    triton: LocalTriton,
    client: MultiModelClient,
    load_timeout: float = DEFAULT_LOAD_TIMEOUT_S,
    progress: Callable[[str], None] | None = None,
    manifest_needed: bool = True,
    held: list[ArchiveModels] | None = None,
) -> LoadedArchive | ReplayRow:
    """Stage, check and load one archive as SageMaker's MME does: the loaded archive, or the failed row
    (endpoint ``check`` or ``load``) saying why it did not load. ``manifest_needed`` False: an archive without a
    conch manifest loads too (its samples come from elsewhere: ``--payload``, a payload folder). ``held``: the
    archives loaded on this server before it (checked together with it as one fleet; it joins them once
    loaded)."""
    from conch.archive.fleet_check import report_models

    name = target_name(archive)
    try:
        folder = stage(archive, triton)
        manifest, check = staged_check(archive, folder, manifest_needed)
    except ConchError as exc:
        return ReplayRow(name, "-", "check", False, str(exc))
    manifest_file = _manifest_of(folder)
    models = report_models(name, check, manifest_file.read_bytes() if manifest_file.is_file() else None)
    clash = fleet_clash(models, held or [])
    if clash is not None:
        return ReplayRow(name, "-", "check", False, clash)
    configs = check.configs
    try:
        check_backends(archive, manifest, configs)
        if progress:
            built = f" ({manifest.target} build for {manifest.release})" if manifest else ""
            progress(f"loading {name}{built}")
        start = time.perf_counter()
        client.load(name, folder, load_timeout)
        load_ms = (time.perf_counter() - start) * 1000
    except ServerExited as exc:  # it names the death and holds the log's end already
        return ReplayRow(name, "-", "load", False, str(exc))
    except ConchError as exc:
        return ReplayRow(name, "-", "load", False, f"{exc}\n{triton.log_tail(25)}")
    if held is not None:
        held.append(models)
    served = configs[check.served] if check.served else None
    refusal = json_refusal(manifest.schema.tensors() if manifest else _tensors(served))
    return LoadedArchive(archive, name, manifest, tuple(_sequence_batched(configs)), refusal, load_ms, served)


def replay_sample(
    client: MultiModelClient,
    loaded: LoadedArchive,
    sample: ReplaySample,
    endpoint: str,
    heard: Listener | None = None,
    first: FirstAnswer | None = None,
) -> ReplayRow:
    """One sample of a loaded archive sent through one endpoint and judged (n/a where the endpoint cannot
    carry it); ``heard`` hears the answer before it is judged. A sample that expects nothing (a bare request)
    passes on the first endpoint when the answer holds every output the served model declares, and on the
    others (``first``: that answer, across the sample's endpoints) when they answer the same."""
    name = loaded.name
    if endpoint == "sagemaker-json" and loaded.refusal:
        return not_applicable(name, sample.name, endpoint, loaded.refusal)
    expected, checks = sample.expected_arrays(), sample.checks
    nothing_expected = not expected
    reference = first.outputs if first is not None and nothing_expected else None
    if reference is not None:  # nothing expected: the endpoints must agree
        expected, checks = reference, {k: Tolerance() for k in reference}
    call: Callable[..., dict[str, Any]] = {
        "kserve": client.invoke_kserve,
        "sagemaker-json": client.invoke_json,
        "sagemaker-binary": client.invoke_binary,
    }[endpoint]
    inputs = sample.input_arrays()
    start, got = time.perf_counter(), None
    try:
        # a model with a sequence batcher refuses a request without a correlation ID, in production too:
        # the replay sends each sample as a sequence of one, as a client of such an ensemble must
        got = call(name, inputs, sequence_id=1) if loaded.sequenced else call(name, inputs)
    except InvokeError as exc:
        row = ReplayRow(name, sample.name, endpoint, False, f"server error: {exc}")
    except ConchError as exc:
        row = ReplayRow(name, sample.name, endpoint, False, str(exc))
    else:
        millis = (time.perf_counter() - start) * 1000
        declared = [t.name for t in loaded.served.io("output")] if loaded.served is not None else []
        missing = [o for o in declared if o not in got]
        if expected:
            row = judge(name, sample.name, endpoint, got, expected, checks, millis)
        elif missing or not got:  # nothing expected: the answer must hold every output the served model declares
            lacks = ", ".join(missing) or "any output"
            row = ReplayRow(name, sample.name, endpoint, False, f"the answer lacks {lacks}, which the served model "
                            "declares", millis)
        else:
            row = ReplayRow(name, sample.name, endpoint, True, f"answered {', '.join(sorted(got))} (nothing "
                            "expected: the other endpoints must answer the same)", millis)
    if first is not None and nothing_expected:
        if reference is not None:
            row.detail = f"the same as {first.endpoint} answered: {row.detail}"
        elif row.passed and got is not None:
            first.endpoint, first.outputs = endpoint, dict(got)
    if loaded.sequenced:
        row.detail += f" (sent as a sequence of one: {', '.join(loaded.sequenced)} has a sequence batcher)"
    if heard and got is not None:
        heard(loaded, sample, endpoint, got)
    return row


def check_backends(archive: Path, manifest: Manifest | None, configs: Mapping[str, ReadConfig],
                   command: str = "replay") -> None:
    """ServeError when a model needs a backend the local server lacks (``configs``: the staged archive's, read
    when it has no manifest); ``command`` (replay, profile) names what to do with a local build instead."""
    served = ({s.model_name: s.served_as for s in manifest.steps} if manifest is not None
              else {name: c.served for name, c in sorted(configs.items()) if not c.is_ensemble})
    lacking = ", ".join(f"{name} ({kind})" for name, kind in served.items() if kind not in WHEEL_BACKENDS)
    if not lacking:
        return
    if manifest is not None:  # a conch build: its local build runs
        raise ServeError(f"{archive.name} is a {manifest.target} build whose steps {lacking} need backends the local "
                         f"server lacks; {command} a `conch build --target local` build (same names and I/O, CPU "
                         "stand-ins)")
    raise ServeError(f"{archive.name} holds model(s) {lacking} whose backends the local server lacks (it runs "
                     f"{', '.join(WHEEL_BACKENDS)} models); {command} them where their backend runs (`conch deploy`), "
                     "or declare them in conch for a local build with CPU stand-ins")


def _tensors(config: ReadConfig | None) -> list[tuple[str, str, str]]:
    """(kind, name, datatype) of the served model's inputs and outputs, the tensors a request body carries."""
    if config is None:
        return []
    return [(kind, t.name, t.data_type.removeprefix("TYPE_")) for kind in ("input", "output") for t in config.io(kind)]


def _sequence_batched(configs: Mapping[str, ReadConfig]) -> list[str]:
    """The models of a staged archive (``configs``: as its check parsed them) whose config has a sequence
    batcher, in the order of their config files' paths."""
    return [name for name, config in sorted(configs.items(), key=lambda item: f"{item[0]}/")
            if config.carried.HasField("sequence_batching")]  # not modelled: carried


def _first_line(error: Exception) -> str:
    return str(error).splitlines()[0]


def _short(row: ReplayRow) -> str:
    return f"{row.ensemble} {row.sample} {row.endpoint}: {row.result} {row.detail.splitlines()[0]}"

