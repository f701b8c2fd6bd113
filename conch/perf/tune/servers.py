"""The servers a tune runs against: the local tritonserver with every archive loaded as SageMaker loads it (one
MME instance), the local MME (requests through its SageMaker runtime front), or any Triton by URL. Each yields
a TrialServer; the local ones are stopped, stubs and all, when the block ends."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

from conch.archive.manifest import Manifest, read_manifest
from conch.errors import BenchError, ConchError
from conch.perf.profile.load import Target
from conch.perf.profile.local_servers import MODES, front_of, load_on_mme, load_staged, sample_bodies, serving_mme
from conch.perf.profile.server_statistics import StatsEndpoint
from conch.perf.tune.space import StepSpace
from conch.perf.tune.trial import TrialServer, Workload, weights_of
from conch.replays.local_replay import DEFAULT_LOAD_TIMEOUT_S, target_name
from conch.triton.mme import MultiModelClient
from conch.triton.server import LocalTriton


def steps_of(name: str, manifest: Manifest) -> list[StepSpace]:
    """The tunable steps of one archive: every step, by its model name on the server and its declared name."""
    return [StepSpace(name, s.model_name, str(s.described.get("name", s.model_name)),
                      str(s.described.get("kind", s.served_as)), int(s.described.get("max_batch_size", 0) or 0))
            for s in manifest.steps]


def _trial_server(stats: StatsEndpoint, named: Sequence[tuple[str, Manifest, Target]],
                  mix: Mapping[str, float] | str | None, server: str, **options: Any) -> TrialServer:
    """A TrialServer sending each named archive's samples to its target, weighted by ``mix``."""
    weights = weights_of([n for n, _, _ in named], mix)
    workloads = []
    for name, manifest, target in named:
        if name not in weights:
            continue
        sent = sample_bodies(manifest)
        if not sent:
            raise BenchError(f"{name} has no samples to send; build it with samples (ensemble.sample(...))")
        workloads.append(Workload(name, target, sent, weights[name]))
    return TrialServer(stats, workloads, [s for n, m, _ in named for s in steps_of(n, m)], server, **options)


@contextmanager
def local_server(archives: Sequence[Path], *, mode: str = "triton", mix: Mapping[str, float] | str | None = None,
                 load_timeout: float = DEFAULT_LOAD_TIMEOUT_S, progress: Callable[[str], None] | None = None,
                 **options: float) -> Iterator[TrialServer]:
    """Every archive loaded on one local server of ``mode``; ``options`` go to TrialServer (p99_ms, ...)."""
    if mode not in MODES:
        raise BenchError(f"mode {mode!r}: choose {' or '.join(MODES)}")
    say = progress or (lambda _: None)
    if mode == "mme":
        with _on_mme(archives, load_timeout, say) as (stats, on_mme, server):
            yield _trial_server(stats, on_mme, mix, server, progress=say, load_timeout=load_timeout, **options)
        return
    with LocalTriton.sized_for(archives) as triton:
        client = MultiModelClient(triton.sagemaker_url, triton.http_url, server=triton)
        named: list[tuple[str, Manifest, Target]] = []
        for archive in archives:
            name, manifest, _ = load_staged(archive, triton, client, load_timeout, say)
            # a manifest is needed (the default), so staging refused an archive without one
            named.append((name, cast(Manifest, manifest), Target.kserve(triton.http_url, name)))
        yield _trial_server(StatsEndpoint(triton.http_url), named, mix, "the local tritonserver", progress=say,
                            load_timeout=load_timeout, watched=triton, **options)


@contextmanager
def _on_mme(archives: Sequence[Path], load_timeout: float, say: Callable[[str], None]
            ) -> Iterator[tuple[StatsEndpoint, list[tuple[str, Manifest, Target]], str]]:
    with serving_mme(archives, load_timeout) as (mme, stats, _):
        named = [(target_name(a), load_on_mme(mme, a, say), front_of(mme, target_name(a))) for a in archives]
        yield stats, named, f"the local MME ({mme.url})"


def remote_server(url: str, archives: Sequence[Path], *, mix: Mapping[str, float] | str | None = None,
                  progress: Callable[[str], None] | None = None, **options: float) -> TrialServer:
    """A Triton conch does not own (``--url``, KServe v2 HTTP with explicit model control): each archive's
    ensemble and steps loaded there under the names its manifest records."""
    named = []
    for archive in archives:
        try:
            manifest = read_manifest(archive)
        except ConchError as exc:
            raise BenchError(f"{archive}: with --url give the archives the server has loaded, for their samples and "
                             f"step names ({exc})") from None
        named.append((manifest.ensemble, manifest, Target.kserve(url, manifest.ensemble)))
    return _trial_server(StatsEndpoint(url), named, mix, url, progress=progress, **options)
