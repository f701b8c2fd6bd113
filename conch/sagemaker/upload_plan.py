"""Which archive `conch deploy` uploads under which TargetModel, and which it stamps first.

An archive is stamped (conch.builder.stamping) when it goes up under a name given with ``--as`` or ``--copies``
(one archive under many names), and otherwise whenever one of its step model names is already used under
the prefix by another TargetModel, or by another archive of the same deploy. Then the fleet check runs over
what stays under the prefix plus the uploads; a problem that involves an upload refuses the deploy, one only
among archives already there is a warning (conch does not touch archives it is not asked to upload).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path

from conch.archive.fleet_check import ArchiveModels, archive_models, check_fleet
from conch.aws import AwsTarget
from conch.builder.stamping import ARCHIVE_SUFFIX, Unpacked, target_model_of
from conch.errors import DeployError
from conch.sagemaker.s3 import ModelLocation, remote_archives


@dataclass(frozen=True)
class PlannedUpload:
    """One upload: the user's archive, the file that goes up (the archive itself, or its stamped copy, named
    as the TargetModel), what the fleet check read of that file, and why it was stamped (None: as built)."""

    source: Path
    target_model: str
    file: Path
    models: ArchiveModels  # what the fleet check read of ``file`` (its S3 metadata on upload)
    stamped: str | None = None
    steps: dict[str, str] = field(default_factory=dict)  # original step -> stamped step


@dataclass
class UploadPlan:
    uploads: list[PlannedUpload]
    already: list[str]  # TargetModels under the prefix before this deploy
    warnings: list[str] = field(default_factory=list)


def requested(archives: Sequence[Path], names: Sequence[str] = (), copies: int = 0) -> list[tuple[Path, str, str]]:
    """(archive, TargetModel, why it must be stamped or '') for every upload the options ask for."""
    if names and copies:
        raise DeployError("give --as NAME (one archive under the names you choose) or --copies N (named "
                          "<archive>-1 … <archive>-N), not both")
    if copies < 0:
        raise DeployError(f"--copies {copies}: give a number of copies of at least 1")
    if names:
        if len(archives) != 1:
            raise DeployError(f"--as names copies of one archive, but {len(archives)} were given; deploy them one "
                              "at a time, or without --as")
        return [(archives[0], target_model_of(n), "--as") for n in names]
    if copies:  # <name>-1.tar.gz … <name>-N.tar.gz, unpadded: copy 7 keeps its name when N grows
        return [(a, f"{a.name.removesuffix(ARCHIVE_SUFFIX)}-{i}{ARCHIVE_SUFFIX}", "--copies") for a in archives
                for i in range(1, copies + 1)]
    return [(a, a.name, "") for a in archives]


def plan_uploads(
    archives: Sequence[Path],
    location: ModelLocation,
    aws: AwsTarget,
    workdir: Path,
    *,
    names: Sequence[str] = (),
    copies: int = 0,
    progress: Callable[[str], None] | None = None,
    read: Mapping[Path, ArchiveModels] | None = None,
) -> UploadPlan:
    """Read what is under the prefix, decide each upload's name and stamp (stamped copies written to
    ``workdir``), and run the fleet check over the result; DeployError when an upload would still break it.
    ``read``: what the fleet check needs of the archives, as their check read it (else each is read here)."""
    wanted = requested(archives, names, copies)
    targets = [t for _, t, _ in wanted]
    twice = sorted({t for t in targets if targets.count(t) > 1})
    if twice:
        raise DeployError(f"two archives are named {twice[0]}; under one prefix the file name is the TargetModel, "
                          "so names must be unique")
    there = remote_archives(location, aws, progress)
    staying = [a for a in there if a.target_model not in targets]  # an upload replaces the key it goes to
    taken: dict[str, str] = {m: a.target_model for a in staying for m in sorted(a.models)}
    uploads: list[PlannedUpload] = []
    fleet: list[ArchiveModels] = list(staying)
    with ExitStack() as unpacking:
        unpacked: dict[Path, Unpacked] = {}  # each archive unpacked once, however many names it goes up under
        for source, target, forced in wanted:
            upload = _plan_one(source, target, forced, taken, workdir, unpacked, unpacking, read or {})
            if progress and upload.stamped:
                progress(f"stamping {source.name} as {target} ({upload.stamped})")
            uploads.append(upload)
            fleet.append(upload.models)
            taken.update({m: target for m in upload.models.models})
    report = check_fleet(fleet)
    mine = set(targets)
    refused = [f for f in report.errors if mine & set(f.archives)]
    if refused:
        lines = "\n".join(f"  {f.message}" for f in refused)
        raise DeployError(f"refusing to deploy: with what is under {location.model_data_url} already, the endpoint "
                          f"could not serve the uploads:\n{lines}")
    plan = UploadPlan(uploads, sorted(a.target_model for a in there))
    plan.warnings += [f.message if mine & set(f.archives) else f"under {location.model_data_url} already: "
                      f"{f.message}" for f in report.findings if f not in refused]
    return plan


def _plan_one(source: Path, target: str, forced: str, taken: dict[str, str], workdir: Path,
              unpacked: dict[Path, Unpacked], unpacking: ExitStack,
              read: Mapping[Path, ArchiveModels]) -> PlannedUpload:
    """One upload, stamped into ``workdir`` when ``forced`` or when its step names are ``taken`` by others."""
    why = forced
    if not forced:  # a forced stamp needs nothing of the archive as built
        models = replace(read.get(source) or archive_models(source), target_model=target)
        clash = sorted(m for m in models.models if m in taken and taken[m] != target)
        if not clash:
            return PlannedUpload(source, target, source, models)
        why = f"step model{'s' if len(clash) > 1 else ''} {', '.join(clash)} already used by {taken[clash[0]]}"
    if source not in unpacked:
        unpacked[source] = unpacking.enter_context(Unpacked(source))
    stamped = unpacked[source].stamp(target, workdir)
    return PlannedUpload(source, target, stamped.archive, archive_models(stamped.archive, target), why,
                         dict(stamped.steps))
