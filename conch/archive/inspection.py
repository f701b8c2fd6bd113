"""What `conch inspect` shows of a built archive: its tree with sizes, each model's config summary, the
environments, the manifest's warmup and shared-memory sections, and the `conch check` verdict."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from conch.archive.check_report import CheckReport
from conch.archive.extract import safe_extract
from conch.archive.manifest import MANIFEST_NAME, Manifest, no_manifest, parse_manifest
from conch.archive.verify import ENV_DIR, check_folder
from conch.compiler.config_reader import ReadConfig, WrittenTensor, config_field, read_config
from conch.errors import ArchiveError, ConfigParseError
from conch.scratch import scratch_temp

CONFIG_LIMIT = 1 << 20  # a config.pbtxt larger than this is not read for the summary (check reports it)


@dataclass(frozen=True)
class Entry:
    """One archive member: path (folders end in ``/``), kind and size in bytes (0 for folders and links)."""

    path: str
    kind: str
    size: int


@dataclass(frozen=True)
class TensorSummary:
    name: str
    datatype: str
    dims: tuple[int, ...]

    def __str__(self) -> str:
        return f"{self.name} {self.datatype} {list(self.dims)}"


@dataclass(frozen=True)
class ModelSummary:
    """A model folder's config.pbtxt, as Triton will read it."""

    model: str
    served_as: str
    max_batch_size: int
    instance_groups: tuple[str, ...] = ()
    dynamic_batching: dict[str, Any] | None = None
    inputs: tuple[TensorSummary, ...] = ()
    outputs: tuple[TensorSummary, ...] = ()
    problem: str | None = None
    #: Fields conch does not model as typed settings (response_cache, optimization, ...), as proto text.
    config_fields: dict[str, str] = field(default_factory=dict)

    def lines(self) -> list[str]:
        if self.problem:
            return [f"  {self.model}: {self.problem}"]
        batching = "no dynamic batching"
        if self.dynamic_batching is not None:
            preferred = self.dynamic_batching["preferred_batch_size"]
            batching = (f"dynamic batching (preferred {preferred or 'any'}, max queue delay "
                        f"{self.dynamic_batching['max_queue_delay_microseconds']} µs)")
        groups = ", ".join(self.instance_groups) or "default instances"
        out = [f"  {self.model}: {self.served_as}, max_batch_size {self.max_batch_size}, {groups}, {batching}"]
        out += [f"    input  {t}" for t in self.inputs]
        out += [f"    output {t}" for t in self.outputs]
        out += [f"    {text}" for text in self.config_fields.values()]
        return out


@dataclass(frozen=True)
class Inspection:
    """Everything `conch inspect` reports about one archive."""

    archive: Path
    compressed_bytes: int
    manifest: Manifest
    entries: list[Entry]
    models: list[ModelSummary]
    check: CheckReport
    environments: dict[str, int] = field(default_factory=dict)  # path in archive -> bytes

    @property
    def ok(self) -> bool:
        return self.check.ok

    @property
    def unpacked_bytes(self) -> int:
        return sum(e.size for e in self.entries)

    def to_json(self) -> dict[str, Any]:
        return {
            "archive": str(self.archive),
            "compressed_bytes": self.compressed_bytes,
            "unpacked_bytes": self.unpacked_bytes,
            "tree": [asdict(e) for e in self.entries],
            "models": [asdict(m) for m in self.models],
            "environments": {path: {"bytes": size, **self.manifest.environments[path].to_json()}
                             if path in self.manifest.environments else {"bytes": size}
                             for path, size in self.environments.items()},
            "check": {"ok": self.check.ok, "findings": [asdict(f) for f in self.check.findings]},
            "manifest": self.manifest.to_json(),
        }

    def lines(self) -> list[str]:
        m = self.manifest
        files = sum(e.kind == "file" for e in self.entries)
        out = [f"ensemble {m.ensemble}  target {m.target}  release {m.release} (stub Python {m.stub_python})",
               f"{self.archive.name}: {size(self.compressed_bytes)} compressed, {size(self.unpacked_bytes)} unpacked "
               f"in {files} files, {len(self.entries)} archive entries"]
        for io, tensors in (("input", m.schema.inputs), ("output", m.schema.outputs)):
            out += [f"  {io:6} {t.name:24} {t.datatype:6} {list(t.shape)}" for t in tensors]
        if m.stamp is not None:
            out.append(f"stamped for TargetModel {m.stamp.target_model}: "
                       + ", ".join(f"{a} -> {b}" for a, b in sorted(m.stamp.steps.items())))
        out.append("tree:")
        out += tree_lines(self.entries)
        out.append("models:")
        out += [line for model in self.models for line in model.lines()]
        if self.environments:
            out.append("environments:")
            for path, nbytes in self.environments.items():
                env = m.environments.get(path)
                what = f", Python {env.python}, {len(env.pins)} pins, {env.source}" if env else ""
                out.append(f"  {path}: {size(nbytes)}{what}")
        out.append("warmup: " + _warmup_line(m))
        out.append("shared memory: " + _shm_line(m))
        out.append(f"samples ({len(m.samples)}): " + ", ".join(s.name for s in m.samples))
        out.append("check: " + ("ok" if self.check.ok else f"FAILED ({len(self.check.errors)} errors)"))
        out += [f"  {f.line(self.check.archive)}" for f in self.check.findings]
        return out


def _warmup_line(m: Manifest) -> str:
    if m.warmup is None:
        return "none"
    steps = "; ".join(f"{model} batch {s.get('batch_size')} x{s.get('count')}" for model, s in m.warmup.steps.items())
    return f"from {m.warmup.source}: {steps}"


def _shm_line(m: Manifest) -> str:
    if m.shm is None:
        return "not recorded"
    s = m.shm
    line = (f"needs {size(s.need_bytes)} per Python-backend instance; shm-default-byte-size {s.default_byte_size}, "
            f"shm-growth-byte-size {s.growth_byte_size}, {size(s.instances_bytes)} over all instances")
    if s.unknown:
        line += f"; not sized: {', '.join(s.unknown)}"
    return line


def size(nbytes: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} B"


def tree_lines(entries: list[Entry], depth: int = 4) -> list[str]:
    """The archive as an indented tree with sizes (folders: the sum below them); what lies deeper than
    ``depth`` levels (e.g. an unpacked environment) is summed into its folder's line."""
    totals: dict[str, tuple[int, int]] = {}  # folder -> (bytes, files)
    for e in entries:
        if e.kind == "dir":
            continue
        parts = e.path.split("/")
        for i in range(1, len(parts)):
            folder = "/".join(parts[:i]) + "/"
            nbytes, count = totals.get(folder, (0, 0))
            totals[folder] = (nbytes + e.size, count + 1)
    sizes = {e.path: e.size for e in entries}
    paths = sorted(set(sizes) | set(totals))
    out = []
    for path in paths:
        parts = path.rstrip("/").split("/")
        if len(parts) > depth:
            continue
        name = parts[-1] + ("/" if path.endswith("/") else "")
        nbytes, count = totals.get(path, (0, 0))
        if not path.endswith("/"):
            nbytes, count = sizes[path], 0
        below = f"  ({count} files)" if path.endswith("/") and len(parts) == depth and count else ""
        out.append(f"  {'  ' * (len(parts) - 1)}{name:{max(1, 40 - 2 * len(parts))}} {size(nbytes):>9}{below}")
    return out


def inspect_archive(archive: Path) -> Inspection:
    """Unpack the archive once (through the one safe extraction) for its tree, manifest, configs and
    `conch check`. ArchiveError naming the archive when it is missing, unreadable, has no manifest conch can
    read, or is one the safe extraction refuses (its refusal, word for word, as the local MME and deploy give
    it: an archive no server would unpack is not read past its first offence, so a gzip bomb stops at its
    budget)."""
    archive = Path(archive)
    if not archive.is_file():
        raise ArchiveError(f"{archive}: no such archive; give the path of a .tar.gz built by `conch build`")
    with scratch_temp("conch-inspect-") as tmp:
        folder = Path(tmp) / "archive"
        safe_extract(archive, folder)
        entries, manifest, configs = _unpacked(folder, archive)
        check = check_folder(folder, archive.name)
    if manifest is None:
        raise no_manifest(archive)
    entries.sort(key=lambda e: e.path)
    environments: dict[str, int] = {}  # conch-envs/<name>: a packed .tar.gz or an unpacked folder
    for e in entries:
        parts = e.path.split("/")
        if parts[0] == ENV_DIR and len(parts) > 1 and parts[1]:
            key = f"{ENV_DIR}/{parts[1]}"
            environments[key] = environments.get(key, 0) + e.size
    models = [summarize_config(name, check.configs.get(name, text)) for name, text in sorted(configs.items())]
    return Inspection(archive, archive.stat().st_size, manifest, entries, models, check,
                      dict(sorted(environments.items())))


Found = tuple[list[Entry], "Manifest | None", dict[str, bytes]]


def _unpacked(folder: Path, archive: Path) -> Found:
    """Tree, manifest and configs of ``archive``, which the safe extraction unpacked at ``folder``."""
    entries: list[Entry] = []
    for path in sorted(folder.rglob("*")):
        name = path.relative_to(folder).as_posix()
        if path.is_symlink():
            entries.append(Entry(name, "link", 0))
        elif path.is_dir():
            entries.append(Entry(name + "/", "dir", 0))
        else:
            entries.append(Entry(name, "file", path.stat().st_size))
    manifest_path = folder / MANIFEST_NAME
    manifest = parse_manifest(manifest_path.read_bytes(), archive) if manifest_path.is_file() else None
    configs = {p.parent.name: p.read_bytes() for p in folder.glob("*/config.pbtxt")
               if p.is_file() and not p.is_symlink() and p.stat().st_size <= CONFIG_LIMIT}
    return entries, manifest, configs


def summarize_config(folder: str, source: bytes | ReadConfig) -> ModelSummary:
    """A config.pbtxt's serving settings (from its bytes, or as `conch check` read it already); a config that
    does not parse gets ``problem`` (check says more)."""
    if isinstance(source, bytes):
        try:
            config = read_config(source, where=f"{folder}/config.pbtxt")
        except ConfigParseError as exc:
            return ModelSummary(folder, "?", 0, problem=f"config.pbtxt does not parse ({exc.reason})")
    else:
        config = source
    carried = config.carried  # instance groups and batching: conch's declaration types them, the check carries them
    groups = tuple(
        f"{g.count or 1} x {model_config_pb2.ModelInstanceGroup.Kind.Name(g.kind)}"
        + (f" gpus {list(g.gpus)}" if g.gpus else "") for g in carried.instance_group)
    batching = None
    if carried.HasField("dynamic_batching"):
        batching = {"preferred_batch_size": list(carried.dynamic_batching.preferred_batch_size),
                    "max_queue_delay_microseconds": carried.dynamic_batching.max_queue_delay_microseconds}
    served = config.served
    if config.is_ensemble:
        served = f"ensemble of {len(config.ensemble_steps)} steps"
    return ModelSummary(folder, served, config.max_batch_size, groups, batching,
                        tuple(_tensors(config.io("input"))), tuple(_tensors(config.io("output"))),
                        config_fields=_carried_fields(config))


def _carried_fields(read: ReadConfig) -> dict[str, str]:
    """The fields conch's typed spec does not model, each as one line of proto text (the reader's view)."""
    from conch.errors import ConchError

    try:
        carried = read.spec.settings.config_fields
    except ConchError:  # a backend conch has no step for: nothing of it is typed
        return {}
    message = carried.message() if carried else None
    out: dict[str, str] = {}
    for name in carried.names:
        out[name] = text_format.MessageToString(config_field(message, name), as_one_line=True)
    return out


def _tensors(items: Iterable[WrittenTensor]) -> Iterator[TensorSummary]:
    for t in items:
        yield TensorSummary(t.name, t.data_type.removeprefix("TYPE_"), t.dims)
