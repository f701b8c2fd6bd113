"""The Python API for notebooks and scripts: ``conch.build``, ``conch.replay`` and ``conch.serve``, the same work
as the commands, each returning a report object that prints as the command's table and displays in Jupyter as an
HTML table (``_repr_html_``, every value escaped)."""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from conch.endpoint.local import LocalMME
    from conch.ensembles.ensemble import Ensemble
    from conch.verdicts import ReplayReport, ReplayRow

RESULT_STYLE = {"ok": "#1a7f37", "FAIL": "#cf222e", "n/a": "#6e7781"}


def _e(value: object) -> str:
    return html.escape(str(value))


def _table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """An HTML table of already escaped cells."""
    head = "".join(f"<th>{h}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


@dataclass(frozen=True)
class BuiltArchive:
    ensemble: str
    archive: Path
    target: str
    release: str

    @property
    def bytes(self) -> int:
        return self.archive.stat().st_size


@dataclass
class BuildReport:
    """What ``conch.build`` wrote: one archive per ensemble."""

    archives: list[BuiltArchive] = field(default_factory=list)

    @property
    def paths(self) -> list[Path]:
        return [a.archive for a in self.archives]

    def __str__(self) -> str:
        return "\n".join(f"{a.ensemble}: {a.archive} ({a.bytes:,} bytes, {a.target} build for {a.release})"
                         for a in self.archives)

    def _repr_html_(self) -> str:
        rows = [(_e(a.ensemble), f"<code>{_e(a.archive)}</code>", f"{a.bytes:,}", _e(a.target), _e(a.release))
                for a in self.archives]
        return _table(("ensemble", "archive", "bytes", "target", "release"), rows)


@dataclass
class ReplayResult:
    """What ``conch.replay`` found: one row per sample and endpoint, as `conch replay` prints them."""

    report: ReplayReport

    @property
    def passed(self) -> bool:
        return self.report.passed

    @property
    def rows(self) -> list[ReplayRow]:
        return self.report.rows

    def __str__(self) -> str:
        return self.report.table()

    def _repr_html_(self) -> str:
        rows = [(_e(r.ensemble), _e(r.sample), _e(r.endpoint),
                 f'<b style="color:{RESULT_STYLE[r.result]}">{_e(r.result)}</b>', f"{r.millis:.1f}",
                 "<br/>".join(_e(line) for line in r.detail.splitlines())) for r in self.report.rows]
        passed, failed, skipped = self.report.tally()
        summary = f"{passed} passed, {failed} failed" + (f", {skipped} not applicable" if skipped else "")
        return _table(("ensemble", "sample", "endpoint", "result", "ms", "detail"), rows) + f"<p>{summary}</p>"


@dataclass
class LocalEndpoint:
    """A local SageMaker multi-model endpoint (`conch serve`'s): call it with boto3's ``sagemaker-runtime`` client
    (``client.invoke_endpoint(EndpointName=endpoint_name, TargetModel=...)``) or ``invoke``; ``stop()`` it, or
    use it as a context manager."""

    url: str
    endpoint_name: str
    client: Any  # boto3 sagemaker-runtime, pointed at url
    target_models: list[str]  # the archives of a folder source (an S3 prefix's are not listed)
    mme: LocalMME

    def invoke(self, target_model: str, inputs: Mapping[str, Any], body: str = "binary") -> dict[str, Any]:
        """``inputs`` (name -> numpy array) sent to ``target_model`` as a ``json`` or ``binary`` body; the outputs."""
        from conch.wire import encode_request, parse_response

        content, content_type = encode_request(inputs, body)
        answer = self.client.invoke_endpoint(EndpointName=self.endpoint_name, TargetModel=target_model,
                                             ContentType=content_type, Body=content)
        return parse_response(answer["Body"].read(), str(answer.get("ContentType", "")), body)

    def stop(self) -> None:
        self.mme.stop()

    def __enter__(self) -> LocalEndpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __str__(self) -> str:
        return f"local MME {self.endpoint_name!r} at {self.url}: {', '.join(self.target_models) or 'no archives'}"

    def _repr_html_(self) -> str:
        rows = [("URL", f"<code>{_e(self.url)}</code>"), ("EndpointName", _e(self.endpoint_name)),
                ("TargetModels", "<br/>".join(_e(t) for t in self.target_models) or "(not listed)")]
        return _table(("local MME", ""), rows)


def build(*what: Ensemble | str | Path, out: str | Path = "build", target: str = "production",
          release: str | None = None) -> BuildReport:
    """Build ensembles (declared here, or the ``.py`` files and folders that declare them) into ``out``, one
    archive each, for ``target`` (production by default, as `conch build` does; ``"local"``: CPU stand-ins)."""
    from conch.builder.discover import discover
    from conch.builder.repository_build import build_ensemble
    from conch.ensembles.ensemble import Ensemble
    from conch.ensembles.target import DEFAULT_RELEASE

    ensembles = [w for w in what if isinstance(w, Ensemble)]
    paths = [Path(w) for w in what if not isinstance(w, Ensemble)]
    ensembles += discover(paths) if paths else []
    release = release or DEFAULT_RELEASE
    report = BuildReport()
    for ensemble in ensembles:
        archive = build_ensemble(ensemble, Path(out), target, release)
        report.archives.append(BuiltArchive(ensemble.name, archive, str(target), str(release)))
    return report


def replay(*archives: str | Path | BuildReport, endpoints: str | Iterable[str] | None = None,
           payloads: str | Path | None = None, load_timeout: float = 300.0) -> ReplayResult:
    """Replay archives' samples (or those of a payload folder: ``payloads``/<archive>/ or ``payloads``) on a local
    tritonserver loaded as SageMaker's MME loads them, through every endpoint (or ``endpoints``: one name, or
    several), as `conch replay` does."""
    from conch.ensembles.payloads import payloads_of
    from conch.replays.local_replay import replay_archives
    from conch.wire import ENDPOINTS

    paths = [p for a in archives for p in (a.paths if isinstance(a, BuildReport) else [Path(a)])]
    chooser = None
    if payloads is not None:
        root = Path(payloads)

        def chooser(archive: Path, manifest: Any) -> Sequence[Any]:
            return payloads_of(root, archive.name)

    return ReplayResult(replay_archives(paths, endpoints=ENDPOINTS if endpoints is None else endpoints,
                                        load_timeout=load_timeout, samples=chooser))


def serve(source: str | Path | BuildReport, *, s3_endpoint_url: str | None = None, **options: Any) -> LocalEndpoint:
    """Start a local SageMaker MME over a folder of archives, a BuildReport's folder or ``s3://bucket/prefix``
    (``options``: conch.endpoint.LocalMME's), with a boto3 ``sagemaker-runtime`` client pointed at it."""
    import boto3

    from conch.endpoint.local import ENDPOINT_NAME, LocalMME
    from conch.errors import ServeError

    if isinstance(source, BuildReport):
        folders = {p.parent for p in source.paths}
        if len(folders) != 1:
            raise ServeError(f"the build wrote to {len(folders)} folders ({', '.join(map(str, sorted(folders)))}); "
                             "one endpoint serves one folder: serve one of them")
        source = folders.pop()
    mme = LocalMME(source, s3_endpoint_url=s3_endpoint_url, **options).start()
    try:
        # the local front checks no signature, but boto3 wants credentials to sign with: none of the user's are sent
        client = boto3.client("sagemaker-runtime", endpoint_url=mme.url, region_name="us-east-1",
                              aws_access_key_id="local", aws_secret_access_key="local")
    except BaseException:
        mme.stop()  # nothing would stop the server otherwise
        raise
    names = [] if str(source).startswith("s3://") else sorted(p.name for p in Path(source).glob("*.tar.gz"))
    return LocalEndpoint(mme.url, options.get("endpoint_name", ENDPOINT_NAME), client, names, mme)
