"""conch's pytest plugin (entry point ``conch.pytest_plugin`` in the ``pytest11`` group): each sample of the
ensembles in the paths given becomes one test item, ``ensemble[sample @ endpoint]``, replayed on a local Triton
loaded as SageMaker's MME loads archives and judged by conch's verdicts (conch.verdicts), so pytest's own
``--junitxml`` reports per sample. ``pytest --conch ensembles/`` (or the ini option ``conch_paths``) collects
declaration files and folders (built once per session for the local target) and ``.tar.gz`` archives. Fixtures:
``conch_triton`` (the session's local Triton with the archives loaded), ``conch_mme`` (a local MME over the
session's archives, a folder or an S3 prefix, with a boto3 ``sagemaker-runtime`` client). With
``--conch-endpoint NAME`` the same samples go to a deployed MME instead. docs/harness.md tells the whole story.

Nothing heavy is imported until a conch item or fixture runs: with autoload on, every pytest run loads this."""

from __future__ import annotations

import fnmatch
import os
import shutil
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from conch.api import LocalEndpoint
    from conch.ensembles.ensemble import Ensemble
    from conch.ensembles.payloads import Payload
    from conch.replays.local_replay import LoadedArchive, ReplaySample
    from conch.triton.mme import MultiModelClient
    from conch.triton.server import LocalTriton
    from conch.verdicts import ReplayRow

LOCAL_ENDPOINTS = ("kserve", "sagemaker-json", "sagemaker-binary")  # conch.wire.ENDPOINTS, without importing it
DEPLOYED_BODIES = ("json", "binary")  # conch.wire.BODIES


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("conch", "conch: replay ensembles' samples as test items")
    group.addoption("--conch", action="store_true", default=False,
                    help="collect each sample of the ensembles in the paths given (declaration .py files or folders, "
                    "built for the local target once per session, and .tar.gz archives) as one test item per "
                    "endpoint: ensemble[sample @ endpoint]")
    group.addoption("--conch-payloads", metavar="DIR", type=Path, default=None,
                    help="replay the samples of this payload folder (DIR/<ensemble>/ when it exists, else DIR) "
                    "instead of the archives' own (docs/harness.md)")
    group.addoption("--conch-release", metavar="YY.MM", default=None,
                    help="the Triton release declarations are built for (default: conch's)")
    group.addoption("--conch-load-timeout", metavar="S", type=float, default=300.0,
                    help="seconds before an archive's load counts as hung (default 300)")
    group.addoption("--conch-endpoint", metavar="NAME", default=None,
                    help="send the samples to this deployed SageMaker MME instead (TargetModel: the archive's "
                    "name), with JSON and binary+json bodies")
    group.addoption("--conch-components", action="store_true", default=False,
                    help="--conch-endpoint hosts inference components: each archive's is <endpoint>-<archive stem> "
                    "(`conch deploy --components`, `conch serve --components`), called by InferenceComponentName")
    group.addoption("--conch-region", metavar="REGION", default=None, help="the deployed endpoint's AWS region")
    group.addoption("--conch-endpoint-url", metavar="URL", default=None,
                    help="a SageMaker-compatible runtime URL for --conch-endpoint (e.g. `conch serve`'s)")
    group.addoption("--conch-mme-source", metavar="FOLDER_OR_S3", default=None,
                    help="what the conch_mme fixture serves: a folder of archives or s3://bucket/prefix (default: "
                    "the session's archives)")
    group.addoption("--conch-s3-endpoint-url", metavar="URL", default=None,
                    help="an S3-compatible server for an s3:// --conch-mme-source (e.g. moto)")
    group.addoption("--conch-allow-exposed-triton", action="store_true", default=False,
                    help="where this machine refuses tritonserver a network namespace of its own, run it with its "
                    "SageMaker port open on every interface without warning (CONCH_ALLOW_EXPOSED_TRITON=1)")
    parser.addini("conch_paths", "paths whose ensembles (declarations, archives) are collected as conch samples "
                  "whenever pytest collects them", type="paths", default=[])


@dataclass
class Source:
    """One ensemble a session replays: an archive, or a declaration built once per session."""

    name: str  # the ensemble's name, as items show it (an archive: its file name without .tar.gz)
    path: Path  # the declaration file or the archive
    ensemble: Ensemble | None = None
    payloads: dict[str, Payload] | None = None  # from --conch-payloads: these instead of the archive's samples

    @property
    def target_model(self) -> str:
        return f"{self.name}.tar.gz"


class SampleFailed(Exception):
    """An item's verdict: the replay row that failed (the check's figures in its detail)."""

    def __init__(self, row: ReplayRow) -> None:
        super().__init__(row.detail)
        self.row = row


@dataclass
class ConchTriton:
    """The session's local tritonserver, with the session's archives loaded as SageMaker's MME loads them."""

    triton: LocalTriton
    client: MultiModelClient
    loaded: dict[str, LoadedArchive] = field(default_factory=dict)  # TargetModel -> its load

    @property
    def http_url(self) -> str:
        return self.triton.http_url

    @property
    def sagemaker_url(self) -> str:
        return self.triton.sagemaker_url


class ConchSession:
    """What one pytest session shares: the sources collected, their archives (built once), one local Triton
    started on first need and stopped at the end, and each archive loaded once."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.sources: dict[str, Source] = {}
        self.selected: list[str] = []  # the sources of the items pytest will run
        self.archives: dict[str, Path | ReplayRow] = {}
        self.loads: dict[str, LoadedArchive | ReplayRow] = {}
        self.manifests: dict[Path, Any] = {}  # archive -> its manifest, read once for the deployed endpoint's items
        self.held: list[Any] = []  # what the fleet check read of each archive loaded (replay's shared-name check)
        self._scratch: Any = None
        self._triton: ConchTriton | None = None
        self.restarts: list[str] = []  # each time the session's tritonserver died and was started again: why
        self._mme: LocalEndpoint | None = None
        self._aws: tuple[Any, Any] | None = None  # the deployed endpoint's AwsTarget and runtime client

    def add(self, source: Source) -> None:
        other = self.sources.get(source.name)
        if other is not None and other.path != source.path:
            raise ValueError(f"ensemble {source.name!r} is in both {other.path} and {source.path}; each name is "
                             "one TargetModel: rename one of them")
        self.sources[source.name] = source

    def archive(self, source: Source) -> Path | ReplayRow:
        """The source's archive: itself, or its declaration built for the local target (once)."""
        if source.name not in self.archives:
            self.archives[source.name] = self._build(source)
        return self.archives[source.name]

    def _build(self, source: Source) -> Path | ReplayRow:
        from conch.builder.repository_build import build_ensemble
        from conch.ensembles.target import DEFAULT_RELEASE
        from conch.scratch import scratch_temp
        from conch.verdicts import ReplayRow

        if source.ensemble is None:
            return source.path
        if self._scratch is None:
            self._scratch = scratch_temp("conch-pytest-")
        folder = Path(self._scratch.name)
        try:
            return build_ensemble(source.ensemble, folder, "local", self.config.getoption("conch_release")
                                  or DEFAULT_RELEASE)
        except Exception as exc:  # every item of this ensemble fails with it; the others run
            return ReplayRow(source.target_model, "-", "build", False, f"{type(exc).__name__}: {exc}")

    def triton(self) -> ConchTriton:
        """The local Triton, started on first need with shared memory sized for every archive to run; started
        again (and counted) when it has died: each archive then loads again on its next item."""
        if self._triton is None:
            from conch.triton.mme import MultiModelClient
            from conch.triton.server import LocalTriton

            server = LocalTriton.sized_for([a for a in (self.archive(self.sources[n]) for n in self.selected
                                                        or self.sources) if isinstance(a, Path)])
            server.start()
            if server.exposed_starts:  # conch's log line would only show beside a failed test: the summary too
                from conch.triton import network_namespace as netns

                if not netns.exposed_allowed():
                    warnings.warn(pytest.PytestWarning(netns.exposure_warning(server.sagemaker_port, netns.refused())),
                                  stacklevel=1)
            self._triton = ConchTriton(server, MultiModelClient(server.sagemaker_url, server.http_url, server=server))
        elif not self._triton.triton.running():
            self._restart(self._triton)
        return self._triton

    def _restart(self, held: ConchTriton) -> None:
        """Start the session's dead server again, on new ports (ConchTriton keeps its identity: the
        ``conch_triton`` fixture's holders see the new one), with nothing loaded; the death is counted."""
        from conch.replays.local_replay import LoadedArchive
        from conch.triton.mme import MultiModelClient

        death = held.triton.lost("the session's items ran")
        self.restarts.append(str(death).splitlines()[0] if death else "tritonserver exited")
        held.client.close()
        server = held.triton
        server.restart()
        shutil.rmtree(server.workdir / "models", ignore_errors=True)  # staged again at their next load
        held.client = MultiModelClient(server.sagemaker_url, server.http_url, server=server)
        held.loaded.clear()
        self.held.clear()
        # the archives that loaded load again on their next item; a failed build or load keeps its row
        self.loads = {name: done for name, done in self.loads.items() if not isinstance(done, LoadedArchive)}

    def load(self, source: Source) -> LoadedArchive | ReplayRow:
        """The source's archive loaded on the session's Triton (once), or the row saying why it did not."""
        if source.name not in self.loads:
            from conch.replays.local_replay import LoadedArchive, load_archive

            archive = self.archive(source)
            if not isinstance(archive, Path):
                self.loads[source.name] = archive
            else:
                triton = self.triton()
                loaded = load_archive(archive, triton.triton, triton.client,
                                      self.config.getoption("conch_load_timeout"), held=self.held)
                self.loads[source.name] = loaded
                if isinstance(loaded, LoadedArchive):
                    triton.loaded[loaded.name] = loaded
        return self.loads[source.name]

    def replay(self, source: Source, sample: str, endpoint: str) -> ReplayRow:
        """One sample through one local endpoint, judged."""
        from conch.replays.local_replay import LoadedArchive, replay_sample

        if self._triton is not None:
            self.triton()  # first: a server that died is started again, and its archives load again
        loaded = self.load(source)
        if not isinstance(loaded, LoadedArchive):
            return loaded
        return replay_sample(self.triton().client, loaded, self.sample_of(source, sample, loaded), endpoint)

    def replay_deployed(self, source: Source, sample: str, body: str, label: str) -> ReplayRow:
        """One sample sent to the deployed endpoint (--conch-endpoint) with a ``json`` or ``binary`` body."""
        from conch.archive.manifest import read_manifest
        from conch.aws import AwsTarget
        from conch.errors import ConchError
        from conch.replays.local_replay import target_name
        from conch.sagemaker.runtime import READ_TIMEOUT_S, invoke
        from conch.verdicts import ReplayRow, judge, not_applicable
        from conch.wire import component_name, json_refusal

        archive = self.archive(source)
        if not isinstance(archive, Path):
            return archive
        target = target_name(archive)
        try:
            manifest = self.manifests.get(archive)
            if manifest is None:
                manifest = self.manifests[archive] = read_manifest(archive)
            chosen = self.sample_of(source, sample, manifest)
            refusal = json_refusal(manifest.schema.tensors())
            if body == "json" and refusal:
                return not_applicable(target, sample, label, refusal)
            if self._aws is None:  # one client for the session's calls
                aws = AwsTarget.resolve(self.config.getoption("conch_region"),
                                        self.config.getoption("conch_endpoint_url"))
                self._aws = (aws, aws.client("sagemaker-runtime", read_timeout=READ_TIMEOUT_S))
            aws, runtime = self._aws
            start = time.perf_counter()
            endpoint = self.config.getoption("conch_endpoint")
            component = component_name(endpoint, archive.name) if self.config.getoption("conch_components") else None
            got = invoke(aws, endpoint, target, chosen.input_arrays(), body=body, runtime=runtime,
                         component=component)
        except ConchError as exc:
            return ReplayRow(target, sample, label, False, str(exc))
        return judge(target, sample, label, got, chosen.expected_arrays(), chosen.checks,
                     (time.perf_counter() - start) * 1000)

    def sample_of(self, source: Source, name: str, loaded: Any) -> ReplaySample:
        """The sample an item names: from the payload folder, or the manifest of the loaded (or read) archive."""
        from conch.errors import ServeError

        if source.payloads is not None:
            return source.payloads[name]
        manifest = getattr(loaded, "manifest", loaded)
        found = manifest.sample(name)
        if found is None:
            raise ServeError(f"{source.target_model} has no sample {name!r} (collected from {source.path}); run "
                             "pytest again")
        return found

    def mme(self) -> LocalEndpoint:
        """A local MME over --conch-mme-source, or over a folder holding the session's archives."""
        if self._mme is None:
            from conch.api import serve
            from conch.scratch import scratch_temp

            source = self.config.getoption("conch_mme_source")
            if source is None:
                if self._scratch is None:
                    self._scratch = scratch_temp("conch-pytest-")
                folder = Path(self._scratch.name) / "mme"
                folder.mkdir(exist_ok=True)
                for name in self.sources:
                    archive = self.archive(self.sources[name])
                    if isinstance(archive, Path) and not (folder / archive.name).exists():
                        (folder / archive.name).symlink_to(archive.resolve())
                source = folder
            self._mme = serve(source, s3_endpoint_url=self.config.getoption("conch_s3_endpoint_url"))
        return self._mme

    def close(self) -> None:
        if self._mme is not None:
            self._mme.stop()
            self._mme = None
        if self._triton is not None:
            self._triton.triton.stop()
            self._triton = None
        if self._scratch is not None:
            self._scratch.cleanup()
            self._scratch = None


SESSION = pytest.StashKey[ConchSession]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[SESSION] = ConchSession(config)
    if config.getoption("conch_allow_exposed_triton"):  # read where a tritonserver starts (the session's, conch_mme's)
        os.environ["CONCH_ALLOW_EXPOSED_TRITON"] = "1"  # conch.triton.network_namespace.ALLOW_EXPOSED_ENV


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """The session's tritonserver restarts, never silent: production would not have restarted it."""
    session = config.stash.get(SESSION, None)
    if session is not None and session.restarts:
        terminalreporter.write_line(f"conch: the session's tritonserver was restarted {len(session.restarts)} "
                                    f"time(s): {'; '.join(session.restarts)}", red=True)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A session whose tritonserver had to be restarted fails, as `conch replay` does."""
    conch = session.config.stash.get(SESSION, None)
    if conch is not None and conch.restarts and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_unconfigure(config: pytest.Config) -> None:
    session = config.stash.get(SESSION, None)
    if session is not None:
        session.close()


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if not _ours(parent.config, file_path):
        return None
    if file_path.name.endswith(".tar.gz"):
        return ConchArchive.from_parent(parent, path=file_path)
    return ConchDeclaration.from_parent(parent, path=file_path)


def _ours(config: pytest.Config, path: Path) -> bool:
    """A file this plugin collects: an archive or a declaration under --conch's paths or ``conch_paths``; never
    a test module, a conftest or a ``_private.py`` helper."""
    if not (path.name.endswith(".tar.gz") or path.suffix == ".py") or path.name.startswith("_"):
        return False
    if path.suffix == ".py" and (path.name == "conftest.py" or any(
            fnmatch.fnmatch(path.name, pattern) for pattern in config.getini("python_files"))):
        return False
    if config.getoption("conch"):
        return True
    return any(path == root or root in path.parents for root in config.getini("conch_paths"))


def pytest_collection_finish(session: pytest.Session) -> None:
    chosen = session.config.stash[SESSION]
    chosen.selected = list(dict.fromkeys(i.source.name for i in session.items if isinstance(i, SampleItem)))


class _ConchFile(pytest.File):
    def items(self, source: Source, samples: list[str]) -> Iterator[SampleItem]:
        from conch.ensembles.payloads import payloads_of
        from conch.errors import ConchError
        from conch.replays.junit_xml import item_name

        payloads = self.config.getoption("conch_payloads")
        try:
            self.config.stash[SESSION].add(source)
            if payloads is not None:
                source.payloads = {p.name: p for p in payloads_of(payloads, source.name)}
                samples = list(source.payloads)
        except (ValueError, ConchError) as exc:
            raise self.CollectError(str(exc)) from None
        deployed = self.config.getoption("conch_endpoint")
        routes = [(f"{deployed} ({b})", b) for b in DEPLOYED_BODIES] if deployed else \
            [(e, e) for e in LOCAL_ENDPOINTS]
        for sample in samples:
            for label, route in routes:
                yield SampleItem.from_parent(self, name=item_name(source.name, sample, label), source=source,
                                             sample=sample, endpoint=label, route=route, deployed=bool(deployed))


class ConchArchive(_ConchFile):
    """A built archive: its samples, read from its manifest (nothing is unpacked)."""

    def collect(self) -> Iterator[SampleItem]:
        from conch.archive.manifest import read_manifest
        from conch.errors import ConchError

        try:
            manifest = read_manifest(self.path)
        except ConchError as exc:
            raise self.CollectError(str(exc)) from None
        yield from self.items(Source(self.path.name.removesuffix(".tar.gz"), self.path),
                              [s.name for s in manifest.samples])


class ConchDeclaration(_ConchFile):
    """A declaration file: each ensemble it declares, and each of its samples (built on first need)."""

    def collect(self) -> Iterator[SampleItem]:
        import conch  # noqa: F401 - the public names register what the declaration layer runs through
        from conch.builder.discover import load_module_ensembles
        from conch.errors import ConchError

        try:
            ensembles = load_module_ensembles(self.path)
        except ConchError as exc:
            raise self.CollectError(str(exc)) from None
        for ensemble in ensembles:
            yield from self.items(Source(ensemble.name, self.path, ensemble), [s.name for s in ensemble.samples])


class SampleItem(pytest.Item):
    """One sample of one ensemble through one endpoint, judged as ``conch replay`` judges it."""

    def __init__(self, *, source: Source, sample: str, endpoint: str, route: str, deployed: bool,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.source, self.sample, self.endpoint, self.route, self.deployed = source, sample, endpoint, route, deployed

    def runtest(self) -> None:
        from conch.errors import ConchError
        from conch.verdicts import ReplayRow

        conch = self.config.stash[SESSION]
        try:
            row = (conch.replay_deployed(self.source, self.sample, self.route, self.endpoint) if self.deployed
                   else conch.replay(self.source, self.sample, self.route))
        except ConchError as exc:
            row = ReplayRow(self.source.target_model, self.sample, self.endpoint, False, str(exc))
        self.user_properties.append(("conch", row.detail))
        if not row.applicable:
            pytest.skip(row.detail)
        if not row.passed:
            raise SampleFailed(row)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str | Any:
        if isinstance(excinfo.value, SampleFailed):
            row = excinfo.value.row
            where = "" if row.endpoint == self.endpoint else f" ({row.endpoint}: the archive failed before the replay)"
            return f"{self.name} failed{where}:\n  " + "\n  ".join(row.detail.splitlines() or ["(no detail)"])
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, self.name


@pytest.fixture(scope="session")
def conch_triton(pytestconfig: pytest.Config) -> ConchTriton:
    """The session's local tritonserver with every collected archive loaded (each once, as SageMaker's MME
    loads it); an archive that failed to build or load is left out, and its items say why."""
    conch = pytestconfig.stash[SESSION]
    for source in conch.sources.values():
        conch.load(source)
    return conch.triton()


@pytest.fixture(scope="session")
def conch_mme(pytestconfig: pytest.Config) -> LocalEndpoint:
    """A local SageMaker MME (conch serve's) over --conch-mme-source, or over the session's archives: its URL,
    endpoint name, a boto3 ``sagemaker-runtime`` client pointed at it and the TargetModels it serves."""
    return pytestconfig.stash[SESSION].mme()
