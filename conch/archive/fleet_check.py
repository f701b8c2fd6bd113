"""The fleet check: archives checked together, as one multi-model endpoint would serve them side by side.

What only breaks when archives share an endpoint: step model names found in two TargetModels (with
``--model-namespacing``, as SageMaker's image runs Triton, Triton polls a step's ``model_name`` in every
repository holding a folder of that name, so copies and versions reload each other, and Triton 2.51 crashed
under such churn; without namespacing the second archive does not load at all), a TargetModel given twice,
archives built for different Triton releases (one endpoint runs one image), and an archive the front end
cannot serve at all (no ensemble, or several). Each archive's configs are read from its stream through the
safe extraction's rules (conch.archive.extract.scan_archive), without unpacking it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, BinaryIO

from conch.archive.check_report import CheckReport, Level
from conch.archive.extract import scan_archive
from conch.archive.manifest import MANIFEST_NAME, parse_manifest
from conch.archive.verify import ENSEMBLE_REGEX, ROOT_MODEL, check_repository, checked, single_model
from conch.compiler.config_reader import ReadConfig, read_config
from conch.ensembles.target import Release
from conch.errors import ArchiveError, ConfigParseError

LISTED = 5  # archives named in one line before "and N more"
STAMP_FIX = ("give each its own step names: `conch stamp ARCHIVE --as NAME` before uploading, or upload with "
             "`conch deploy` (it stamps an archive whose step names are taken under the prefix)")


@dataclass(frozen=True)
class ArchiveModels:
    """What the fleet check needs of one archive: its TargetModel, its ensembles, its other model folders, the
    folders its ensembles call, and from its manifest the release and stamp. Small enough to travel in the S3
    object's metadata (:meth:`summary`), so a prefix is checked without downloading what conch uploaded."""

    target_model: str
    ensembles: tuple[str, ...] = ()
    models: frozenset[str] = frozenset()  # model folders other than the ensembles
    steps: frozenset[str] = frozenset()  # model folders its ensembles call
    release: str | None = None
    stamped_for: str | None = None  # the TargetModel its stamp names
    # the model folder of a single-model archive: served under the TargetModel (a model mapping), so its folder
    # name is no model name on the endpoint (Triton skips a mapped folder when it looks a step up by name)
    single: str | None = None
    problem: str | None = None  # why the archive could not be read
    # the local file as `conch check` read it (device, inode, size, mtime in ns): a deploy given this check
    # checks the file again when it no longer matches (rewritten or replaced since)
    checked_as: tuple[int, int, int, int] | None = field(default=None, compare=False)

    def unchanged_since_check(self, path: Path) -> bool:
        """Whether ``path`` is still the file this was read from (False when unknown or gone)."""
        return self.checked_as is not None and self.checked_as == file_identity(path)

    def summary(self) -> str:
        """A compact JSON form (ASCII: model names are checked shell-safe) for S3 metadata."""
        return json.dumps({"v": 1, "ensembles": list(self.ensembles), "models": sorted(self.models),
                           "steps": sorted(self.steps), "release": self.release, "stamped_for": self.stamped_for,
                           **({"single": self.single} if self.single else {})},
                          separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_summary(cls, target_model: str, text: str) -> ArchiveModels | None:
        """The archive's models from :meth:`summary`'s text; None when it is not one this conch wrote."""
        try:
            data = json.loads(text)
            if data.get("v") != 1:
                return None
            return cls(target_model, tuple(map(str, data["ensembles"])), frozenset(map(str, data["models"])),
                       frozenset(map(str, data["steps"])), data.get("release"), data.get("stamped_for"),
                       data.get("single"))
        except (ValueError, KeyError, TypeError, AttributeError):
            return None


def read_archive_models(stream: BinaryIO, target_model: str, size: int | None = None) -> ArchiveModels:
    """Stream one archive (a file or an S3 body) for its configs and manifest; an archive that cannot be read
    comes back with ``problem`` set (the fleet check reports it)."""
    folders: set[str] = set()  # the root's folders that hold a file

    def wanted(path: str) -> bool:
        if "/" in path:
            folders.add(path.split("/", 1)[0])
        return path in (MANIFEST_NAME, "config.pbtxt") or (path.count("/") == 1 and path.endswith("/config.pbtxt"))

    try:
        found = scan_archive(stream, target_model, wanted, size=size)
    except ArchiveError as exc:
        return ArchiveModels(target_model, problem=str(exc))
    if "config.pbtxt" in found:  # SageMaker loads the archive itself as one model
        return _archive_models(target_model, {}, found.get(MANIFEST_NAME), ROOT_MODEL)
    configs: dict[str, ReadConfig] = {}
    for path, data in sorted(found.items()):
        if path == MANIFEST_NAME:
            continue
        try:
            text = data.decode("utf-8")
            config = read_config(text, where=path)
        except (UnicodeDecodeError, ConfigParseError):
            continue  # `conch check` of the archive says why; the fleet check needs the configs that parse
        if config.is_ensemble and not ENSEMBLE_REGEX.search(text):
            config = replace(config, served="")  # the front end would not find it: not an ensemble to SageMaker
        configs[path.split("/")[0]] = config
    return _archive_models(target_model, configs, found.get(MANIFEST_NAME), single_model(folders, configs))


def check_archive_models(path: Path, release: Release | str | None = None
                         ) -> tuple[CheckReport, ArchiveModels | None]:
    """`conch check` of a local archive for Triton ``release`` (None: the one it was built for) and, when it passes,
    what the fleet check needs of it (TargetModel: its file name), from one unpacking: each config is parsed once,
    by the check."""
    path = Path(path)
    identity = file_identity(path)
    with checked(path, release) as (report, folder):
        if folder is None or not report.ok:
            return report, None
        manifest = folder / MANIFEST_NAME
        data = manifest.read_bytes() if manifest.is_file() and not manifest.is_symlink() else None
        # The regular files the stream's reading takes (a passing check found one ensemble, written so that
        # the front end's regex finds it).
        configs = {name: config for name, config in report.configs.items()
                   if not (folder / name / "config.pbtxt").is_symlink()}
    return report, replace(_archive_models(path.name, configs, data, report.single), checked_as=identity)


def check_repository_models(folder: Path, release: Release | str | None = None
                            ) -> tuple[CheckReport, ArchiveModels | None]:
    """`conch check` of an unpacked model repository, as the archive ``NAME.tar.gz`` it would become (NAME: the
    folder's), for Triton ``release``, and what the fleet check needs of it when it passes."""
    folder = Path(folder)
    report = check_repository(folder, release)
    if not report.ok:
        return report, None
    manifest = folder / MANIFEST_NAME
    data = manifest.read_bytes() if manifest.is_file() else None
    return report, _archive_models(f"{folder.resolve().name}.tar.gz", report.configs, data, report.single)


def file_identity(path: Path) -> tuple[int, int, int, int] | None:
    """A file's device, inode, size and mtime (ns), or None when it cannot be read."""
    try:
        st = Path(path).stat()
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def report_models(target_model: str, report: CheckReport, manifest_data: bytes | None) -> ArchiveModels:
    """What the fleet check needs of an archive whose `conch check` passed (its ``report``), without reading the
    archive again: its configs as the check parsed them and its manifest's bytes."""
    return _archive_models(target_model, report.configs, manifest_data, report.single)


def _archive_models(target_model: str, configs: dict[str, ReadConfig], manifest_data: bytes | None,
                    single: str | None = None) -> ArchiveModels:
    manifest = None
    if manifest_data is not None:
        try:
            manifest = parse_manifest(manifest_data, target_model)
        except ArchiveError:
            manifest = None
    ensembles = tuple(sorted(name for name, c in configs.items() if c.is_ensemble))
    called = {s.model_name for c in configs.values() for s in c.ensemble_steps}
    return ArchiveModels(target_model, ensembles, frozenset(set(configs) - set(ensembles) - {single}),
                         frozenset(called & set(configs)), manifest.release if manifest else None,
                         manifest.stamp.target_model if manifest and manifest.stamp else None, single=single)


def archive_models(path: Path, target_model: str | None = None) -> ArchiveModels:
    """:func:`read_archive_models` of a local archive (TargetModel: its file name unless given)."""
    path = Path(path)
    with path.open("rb") as fh:
        return read_archive_models(fh, target_model or path.name, path.stat().st_size)


@dataclass(frozen=True)
class FleetFinding:
    """One problem of archives together: its level, the archives and models it concerns, and what to do."""

    level: Level
    kind: str  # shared-step-names | duplicate-target-model | releases | no-ensemble | several-ensembles | ...
    archives: tuple[str, ...]
    message: str
    models: tuple[str, ...] = ()

    def line(self) -> str:
        return f"fleet: {self.level}: {self.message}"


@dataclass
class FleetReport:
    """The fleet check of a set of archives served from one endpoint."""

    archives: tuple[str, ...]
    findings: list[FleetFinding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def errors(self) -> list[FleetFinding]:
        return [f for f in self.findings if f.level == "error"]

    def lines(self) -> list[str]:
        out = [f.line() for f in self.findings]
        if self.ok:
            out.append(f"fleet: ok: {len(self.archives)} archives can share one endpoint")
        return out

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "archives": list(self.archives), "findings": [asdict(f) for f in self.findings]}


def named(archives: Sequence[str]) -> str:
    """A list of archives for one line: the first few, then how many more."""
    shown = ", ".join(archives[:LISTED])
    return shown if len(archives) <= LISTED + 1 else f"{shown} and {len(archives) - LISTED} more"


def shared_steps(fleet: Sequence[ArchiveModels]) -> dict[tuple[str, ...], list[str]]:
    """{archives sharing them: model names} for every model folder name found in several archives and called
    as a step by at least one of them."""
    owners: dict[str, list[str]] = {}
    for archive in fleet:
        for model in sorted(archive.models):
            holders = owners.setdefault(model, [])
            if archive.target_model not in holders:  # a TargetModel given twice is its own finding
                holders.append(archive.target_model)
    called = set().union(*(a.steps for a in fleet)) if fleet else set()
    groups: dict[tuple[str, ...], list[str]] = {}
    for model, holders in sorted(owners.items()):
        if len(holders) > 1 and model in called:
            groups.setdefault(tuple(holders), []).append(model)
    return groups


def check_fleet(fleet: Sequence[ArchiveModels]) -> FleetReport:
    """Everything that breaks when ``fleet`` is served from one endpoint (one prefix, one image)."""
    report = FleetReport(tuple(a.target_model for a in fleet))
    add = report.findings.append
    names = [a.target_model for a in fleet]
    for name in sorted({n for n in names if names.count(n) > 1}):
        add(FleetFinding("error", "duplicate-target-model", (name,), f"TargetModel {name} is given "
                         f"{names.count(name)} times; under one prefix the archive's key is its TargetModel, so one "
                         "would replace the other: give each archive a name of its own"))
    readable = []
    for archive in fleet:
        if archive.problem:
            add(FleetFinding("error", "unreadable", (archive.target_model,), archive.problem))
            continue
        ensembles = archive.ensembles
        if not ensembles and archive.single is None:
            add(FleetFinding("error", "no-ensemble", (archive.target_model,), f"{archive.target_model} holds no "
                             "ensemble config (platform: \"ensemble\" written literally): SageMaker's front end "
                             "would serve whichever folder it lists last; run `conch check` on it"))
        elif len(ensembles) > 1:
            add(FleetFinding("error", "several-ensembles", (archive.target_model,), f"{archive.target_model} holds "
                             f"{len(ensembles)} ensembles ({', '.join(ensembles)}): SageMaker serves one per archive; "
                             "build one archive per ensemble", ensembles))
        if archive.stamped_for is not None and archive.stamped_for != archive.target_model:
            add(FleetFinding("warning", "stamped-for-another-name", (archive.target_model,),
                             f"{archive.target_model} was stamped for TargetModel {archive.stamped_for}; stamp it as "
                             f"its own name (`conch stamp ARCHIVE --as {archive.target_model}`) so its step names "
                             "follow from the name it is served under"))
        readable.append(archive)
    for holders, models in shared_steps(readable).items():
        both = "both" if len(holders) == 2 else f"all {len(holders)}"
        add(FleetFinding("error", "shared-step-names", holders, f"{named(holders)} {both} hold step model"
                         f"{'s' if len(models) > 1 else ''} {', '.join(models)}: on one endpoint (SageMaker's image "
                         "runs Triton with --model-namespacing) each load or unload of one reloads the others, which "
                         "crashed Triton 2.51 under churn, and without namespacing the second does not load at all; "
                         f"{STAMP_FIX}", tuple(models)))
    _releases(readable, add)
    return report


def _releases(fleet: Sequence[ArchiveModels], add: Any) -> None:
    built: dict[str, list[str]] = {}
    for archive in fleet:
        if archive.release is not None:
            built.setdefault(archive.release, []).append(archive.target_model)
    if len(built) > 1:
        listing = "; ".join(f"{release}: {named(names)}" for release, names in sorted(built.items()))
        add(FleetFinding("error", "releases", tuple(n for names in built.values() for n in names),
                         f"the archives were built for different Triton releases ({listing}); one endpoint runs one "
                         "image (and one Python for every Python-backend step): rebuild them for one release"))
