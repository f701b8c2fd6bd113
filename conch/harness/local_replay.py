"""Replay each archive's sample payloads against a local Triton loaded the way SageMaker MME loads it,
compare with the expected outputs, and report a table."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from conch.archive.check_report import CheckReport
from conch.archive.extract import safe_extract
from conch.archive.manifest import MANIFEST_NAME, Manifest, read_manifest
from conch.archive.verify import ROOT_MODEL, check_folder
from conch.compiler.config_reader import ReadConfig
from conch.ensembles.samples import OutputCheck, Tolerance
from conch.errors import ArchiveError, ConchError, ServeError
from conch.harness.mme import InvokeError, MultiModelClient
from conch.harness.mme_contract import root_model_staged
from conch.harness.payloads import Payload
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
    return root_model_staged(folder)


def _manifest_of(folder: Path) -> Path:
    """Where a staged archive's manifest is (inside ``model/`` for an archive with a root config.pbtxt)."""
    return folder / MANIFEST_NAME if (folder / MANIFEST_NAME).is_file() else folder / ROOT_MODEL / MANIFEST_NAME


def staged_check(archive: Path, folder: Path, manifest_needed: bool = True) -> tuple[Manifest | None, CheckReport]:
    """The manifest of a staged archive that passes `conch check` (None for one without, unless
    ``manifest_needed``) and the check's report; ServeError saying why not."""
    return _checked(archive, folder, payloads=None if manifest_needed else ())


def _checked(archive: Path, folder: Path, payloads: Sequence[Payload] | None) -> tuple[Manifest | None, CheckReport]:
    """The manifest of a staged archive that passes `conch check` (None when ``payloads`` stand in for the
    samples of an archive without one), and the check's report (each model folder's config as it parsed it)."""
    report = check_folder(folder, archive.name)
    if not report.ok:
        raise ServeError(report.summary())
    manifest = _manifest_of(folder)
    if not manifest.is_file():
        if payloads is not None:
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


def replay_archives(
    archives: Sequence[Path],
    *,
    endpoints: Iterable[str] = ENDPOINTS,
    load_timeout: float = DEFAULT_LOAD_TIMEOUT_S,
    server: LocalTriton | None = None,
    progress: Callable[[str], None] | None = None,
    done: Callable[[Path], None] | None = None,
    payloads: Sequence[Payload] | None = None,
) -> ReplayReport:
    """Load every archive into one server (as an MME does) and replay its samples (or ``payloads``, given) on
    each endpoint; ``done`` hears of each archive once its rows are in (for a progress bar)."""
    endpoints = tuple(endpoints)
    for e in endpoints:
        if e not in ENDPOINTS:
            raise ServeError(f"unknown endpoint {e!r}: use {', '.join(ENDPOINTS)}")
    report = ReplayReport()
    own = server is None
    if server is None:
        from conch.builder.shm_sizing import archives_settings

        default, growth, _ = archives_settings(archives)  # sized silently: the build warned about production
        server = LocalTriton(shm_default_byte_size=default, shm_growth_byte_size=growth)
    triton = server
    clashing = fleet_clashes(archives)
    try:
        if own:
            triton.start()
        client = MultiModelClient(triton.sagemaker_url, triton.http_url)
        for archive in archives:
            if target_name(archive) in clashing:
                report.rows.append(ReplayRow(target_name(archive), "-", "check", False,
                                             clashing[target_name(archive)]))
            else:
                _replay_one(archive, triton, client, endpoints, load_timeout, report, progress, payloads)
            if done:
                done(archive)
    finally:
        if own:
            triton.stop()
    return report


def fleet_clashes(archives: Sequence[Path]) -> dict[str, str]:
    """{TargetModel: the fleet check's finding} for each archive that cannot load beside one before it on one
    server: step model names another archive holds (`conch check`'s words; without this, Triton's raw error, e.g.
    "ensemble tensor IN0: inconsistent data type"). The first holder of the names loads; the others do not."""
    if len(archives) < 2:
        return {}
    from conch.archive.fleet_check import archive_models, check_fleet

    report = check_fleet([archive_models(a) for a in archives if a.is_file()])
    clashing: dict[str, str] = {}
    for finding in report.errors:
        if finding.kind == "shared-step-names":
            for name in finding.archives[1:]:
                clashing.setdefault(name, f"fleet: {finding.message} (not loaded: {finding.archives[0]} holds them "
                                    "and loaded first)")
    return clashing


def _replay_one(
    archive: Path,
    triton: LocalTriton,
    client: MultiModelClient,
    endpoints: tuple[str, ...],
    load_timeout: float,
    report: ReplayReport,
    progress: Callable[[str], None] | None,
    payloads: Sequence[Payload] | None = None,
) -> None:
    name = target_name(archive)
    try:
        folder = stage(archive, triton)
        manifest, check = _checked(archive, folder, payloads)
    except ConchError as exc:
        report.rows.append(ReplayRow(name, "-", "check", False, str(exc)))
        return
    configs = check.configs
    try:
        check_backends(archive, manifest, configs)
        if progress:
            built = f" ({manifest.target} build for {manifest.release})" if manifest else ""
            progress(f"loading {name}{built}")
        start = time.perf_counter()
        client.load(name, folder, load_timeout)
        load_ms = (time.perf_counter() - start) * 1000
    except ConchError as exc:
        report.rows.append(ReplayRow(name, "-", "load", False, f"{exc}\n{triton.log_tail(25)}"))
        return
    report.rows.append(ReplayRow(name, "-", "load", True, "loaded via POST /models", load_ms))
    sent = list(payloads) if payloads is not None else [
        Payload(s.name, s.input_arrays(), s.expected_arrays(), s.checks) for s in manifest.samples] if manifest else []
    if not sent:
        report.rows.append(ReplayRow(name, "-", "-", False, "the archive has no samples to replay"))
    sequenced = _sequence_batched(configs)
    served = configs[check.served] if check.served else None
    refusal = json_refusal(manifest.schema.tensors() if manifest else _tensors(served))
    for sample in sent:
        first: dict[str, np.ndarray] | None = None
        first_endpoint = ""
        for endpoint in endpoints:
            if endpoint == "sagemaker-json" and refusal:
                row = not_applicable(name, sample.name, endpoint, refusal)
            else:
                expected, checks = sample.expected, sample.checks
                if not expected and first is not None:  # nothing expected: the endpoints must agree
                    expected, checks = first, {k: Tolerance() for k in first}
                row, got = _replay_sample(client, name, sample.name, endpoint, sample.inputs, expected, checks,
                                          sequenced, served)
                if first is None and row.passed and not sample.expected:
                    first, first_endpoint = got, endpoint
                elif not sample.expected and first is not None:
                    row.detail = f"the same as {first_endpoint} answered: {row.detail}"
                if sequenced:
                    row.detail += f" (sent as a sequence of one: {', '.join(sequenced)} has a sequence batcher)"
            report.rows.append(row)
            if progress:
                progress(_short(row))


def check_backends(archive: Path, manifest: Manifest | None, configs: Mapping[str, ReadConfig]) -> None:
    """ServeError when a model needs a backend the local server lacks."""
    if manifest is not None:
        lacking = [f"{s.model_name} ({s.served_as})" for s in manifest.steps if s.served_as not in LOCAL_BACKENDS]
        if lacking:
            raise ServeError(
                f"{archive.name} is a {manifest.target} build whose steps {', '.join(lacking)} need backends the "
                "local server lacks; replay a `conch build --target local` build (same names and I/O, CPU stand-ins)"
            )
        return
    lacking = [f"{name} ({c.served})" for name, c in sorted(configs.items())
               if not c.is_ensemble and c.served not in LOCAL_BACKENDS]
    if lacking:
        raise ServeError(f"{archive.name} holds model(s) {', '.join(lacking)} whose backends the local server lacks "
                         f"(it runs {', '.join(LOCAL_BACKENDS)} models); replay them where their backend runs (`conch "
                         "deploy`), or declare them in conch for a local build with CPU stand-ins")


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
    served: ReadConfig | None = None,
) -> tuple[ReplayRow, dict[str, np.ndarray] | None]:
    """One sample through one endpoint: its row, and the answer. With nothing expected (a KServe v2 request
    given as --payload), the first answer must hold every output the served model declares."""
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
        return ReplayRow(name, sample, endpoint, False, f"server error: {exc}"), None
    except ConchError as exc:
        return ReplayRow(name, sample, endpoint, False, str(exc)), None
    millis = (time.perf_counter() - start) * 1000
    if expected:
        return judge(name, sample, endpoint, got, expected, checks, millis), got
    declared = [t.name for t in served.io("output")] if served is not None else []
    missing = [o for o in declared if o not in got]
    if missing or not got:
        return ReplayRow(name, sample, endpoint, False, f"the answer lacks {', '.join(missing) or 'any output'}, "
                         "which the served model declares", millis), got
    return ReplayRow(name, sample, endpoint, True, f"answered {', '.join(sorted(got))} (nothing expected: the "
                     "other endpoints must answer the same)", millis), got
