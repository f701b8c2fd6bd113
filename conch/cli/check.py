"""`conch check ARCHIVE…`: check MME archives as SageMaker's Triton front end and Triton will read them, each
alone and, given several (files, folders, or an S3 prefix), together as one endpoint would serve them."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from conch.cli.console import document, error, progress_bar, result, say
from conch.cli.flags import Subcommands
from conch.ensembles.target import DEFAULT_RELEASE, Release

if TYPE_CHECKING:
    from conch.archive.fleet_check import ArchiveModels


def cmd_check(args: argparse.Namespace) -> int:
    from conch.archive.check_report import CheckReport
    from conch.archive.fleet_check import check_archive_models, check_fleet, check_repository_models
    from conch.archive.verify import is_model_repository

    if args.release is not None:
        Release.of(args.release)  # a malformed release is one error line before any archive is read
    archives: list[Path] = []
    prefixes: list[str] = []
    for item in args.archives:
        if item.startswith("s3://"):
            prefixes.append(item)
            continue
        path = Path(item)
        found = sorted(path.glob("*.tar.gz")) if path.is_dir() else [path]
        # a folder without archives that holds model folders is the archive it would become
        archives.extend(found or ([path] if is_model_repository(path) else []))
    fleet: list[ArchiveModels] = []
    with progress_bar("reading S3", None) as bar:
        for url in prefixes:  # their configs read as a fleet, not unpacked
            from conch.aws import AwsTarget
            from conch.sagemaker.s3 import ModelLocation, remote_archives

            aws = AwsTarget.resolve(args.region, args.s3_endpoint_url)
            fleet += remote_archives(ModelLocation.parse(url), aws, bar.line)
    if not archives and not fleet:
        say(f"conch: error: no .tar.gz archives in {', '.join(map(str, args.archives))}; give archive files, "
            "folders of them, an unpacked model repository (folders with config.pbtxt) or an s3://bucket/prefix "
            "holding archives")
        return 2
    reports: list[CheckReport] = []
    with progress_bar("checking", len(archives)) as bar:
        for archive in archives:
            check = check_repository_models if archive.is_dir() else check_archive_models
            report, models = check(archive, args.release)
            reports.append(report)
            result("\n".join(report.lines()))
            if models is not None:  # one failing alone is refused already; the fleet is of those that could deploy
                fleet.append(models)
            bar.advance()
    together = check_fleet(fleet) if len(fleet) > 1 or prefixes else None
    if together is not None:  # its errors are shown below, where --quiet still shows them
        shown = [f.line() for f in together.findings if f.level != "error"]
        shown += together.lines()[-1:] if together.ok else []
        if shown:
            result("\n".join(shown))
    failed = [r for r in reports if not r.ok]
    for report in failed:  # what --quiet still shows; the findings above name each file
        error(report.summary())
    for finding in together.errors if together else []:
        error(f"fleet: {finding.message}")
    if failed:
        say(f"conch: {len(failed)} of {len(archives)} archives fail the check")
    fleet_failed = together is not None and not together.ok
    document({"ok": not failed and not fleet_failed, "archives": [
        {"archive": str(path), "ok": r.ok, "ensemble": r.ensemble, "single": r.single, "models": r.models,
         "findings": [{"level": f.level, "file": f.file, "message": f.message} for f in r.findings]}
        for path, r in zip(archives, reports, strict=True)],
        "fleet": together.to_json() if together else None})
    return 1 if failed or fleet_failed else 0


def register(sub: Subcommands) -> None:
    c = sub.add_parser("check", help="check MME archives (conch-built or hand-made) as SageMaker and Triton read them, "
                       "and several together as one endpoint serves them")
    c.add_argument("archives", nargs="+", help=".tar.gz archives, folders of them, model repository folders "
                   "(checked as the archive they would become), or s3://bucket/prefix (the archives "
                   "under it: their configs are read as a fleet, not unpacked)")
    c.add_argument("--release",
                   help="the Triton release (YY.MM) whose image the archives are checked for: its load rules, its "
                   "Python-backend stub, its backends; on archives built for another release, what will break there "
                   f"(default: the release each archive was built for, else {DEFAULT_RELEASE})")
    c.add_argument("--s3-endpoint-url", help="S3-compatible server for s3:// prefixes (e.g. a local moto)")
    c.add_argument("--region", help="AWS region for s3:// prefixes (default: AWS_REGION or the profile's)")
    c.set_defaults(func=cmd_check)
