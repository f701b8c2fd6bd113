"""Profiling inside other commands: the load a profile sends (`--requests`, `--concurrency`, `--payload`),
`conch replay --profile` (each archive profiled on the server that replayed it) and `conch bench --profile`
(Triton's statistics before and after the load)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from conch.cli.console import result, say

if TYPE_CHECKING:
    from conch.archive.manifest import Manifest
    from conch.perf.profile.measure import Load
    from conch.perf.profile.profile_report import Profile


def load_of(args: argparse.Namespace, manifest: Manifest | None) -> Load:
    """The load the flags ask for: the payload file (one KServe v2 JSON request, sent as it is), or the
    archive's samples."""
    from conch.ensembles.payloads import check_json_request
    from conch.errors import ServeError
    from conch.perf.profile.load import Body
    from conch.perf.profile.local_servers import sample_bodies
    from conch.perf.profile.measure import Load

    if args.payload is not None:
        try:
            body = Body(check_json_request(args.payload.read_bytes()))
        except ValueError as exc:
            raise ServeError(f"--payload {args.payload}: not a KServe v2 JSON request ({exc}); write "
                             '{"inputs": [{"name": ..., "shape": [...], "datatype": ..., "data": [...]}]}') from None
        return Load((body,), args.payload.name, args.requests, args.concurrency)
    bodies = sample_bodies(manifest) if manifest is not None else ()
    return Load(bodies, f"{len(bodies)} sample(s)", args.requests, args.concurrency)


def bench_profiler(args: argparse.Namespace, own: object, names: list[str]) -> Any:
    """For `conch bench --profile`: statistics taken before the load, on the server the bench runs against
    (conch's own, or ``--stats-url`` behind ``--endpoint-url``); None without ``--profile``."""
    from conch.errors import BenchError
    from conch.perf.profile.around import AroundLoad
    from conch.perf.profile.server_statistics import StatsEndpoint

    if not getattr(args, "profile", False):
        return None
    triton = getattr(own, "triton", None)
    url = own if isinstance(own, str) else (triton.http_url if triton is not None else args.stats_url)
    if not url:
        raise BenchError("--profile reads Triton's statistics: with --endpoint-url give --stats-url, the KServe v2 "
                         "HTTP address of the Triton behind it (`conch serve` prints it as triton.http_port)")
    return AroundLoad(StatsEndpoint(url), names).start()


def bench_profiles(around: Any, summary: dict[str, Any], server: str) -> list[dict[str, Any]]:
    """The bench's profile section: one profile per TargetModel, from the statistics before and after its load."""
    from conch.perf.profile.around import bench_run

    profiles = around.finish(bench_run(summary, server))
    for p in profiles:
        result(p.table() + "\n")
    return [p.to_json() for p in profiles]


class ReplayProfiler:
    """For `conch replay --profile`: the server replay runs on, with metrics on, and each archive profiled on it
    with its samples once replay is done with it. Without ``--profile`` it does nothing (replay starts its own)."""

    def __init__(self, args: argparse.Namespace, archives: list[Path]) -> None:
        self.args, self.archives = args, archives
        self.server: Any = None
        self.profiles: list[Profile] = []
        self._stats: Any = None
        self._trace_file: Path | None = None
        self._context: Any = None

    def __enter__(self) -> ReplayProfiler:
        if getattr(self.args, "profile", False) and self.archives:
            from conch.perf.profile.local_servers import profiling_triton

            self._context = profiling_triton(self.archives)
            self.server, self._stats, self._trace_file = self._context.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._context is not None:
            self._context.__exit__(*exc)

    def done(self, archive: Path) -> None:
        from conch.errors import ConchError
        from conch.perf.profile.local_servers import profile_loaded

        if self.server is None:
            return
        try:
            say(f"profiling {archive.name}")
            self.profiles.append(profile_loaded(archive, self.server, self._stats, lambda m: load_of(self.args, m),
                                                self._trace_file))
        except ConchError as exc:  # an archive that did not load or answer: replay's rows say why
            say(f"conch: warning: {archive.name} not profiled: {' '.join(str(exc).split())}")

    def document(self) -> dict[str, Any]:
        for p in self.profiles:
            result(p.table() + "\n")
        return {"profiles": [p.to_json() for p in self.profiles]} if self.server is not None else {}
