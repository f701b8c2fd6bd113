"""What `conch check` finds in one archive, and the model folders it reads: the types the archive check
(verify.py) and its release check (release_check.py) share."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from conch.compiler.config_reader import ReadConfig

Level = Literal["error", "warning"]


@dataclass(frozen=True)
class Finding:
    """One thing wrong (error) or worth knowing (warning), in one file of the archive."""

    level: Level
    file: str
    message: str

    def line(self, archive: str) -> str:
        where = f"{archive}/{self.file}" if self.file else archive
        return f"{where}: {self.level}: {self.message}"


@dataclass
class CheckReport:
    """Everything found in one archive."""

    archive: str
    findings: list[Finding] = field(default_factory=list)
    ensemble: str | None = None
    single: str | None = None  # the model folder of a single-model archive (``model`` for a root config.pbtxt)
    models: int = 0
    # Each model folder's config as the check read it (the typed reader's spec), for whoever goes on with the
    # unpacked archive (stamp, the local MME's staging, replay, inspect), so no config.pbtxt is parsed twice.
    configs: dict[str, ReadConfig] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def served(self) -> str | None:
        """The model folder SageMaker's front end serves as the TargetModel: the ensemble's, or the single model's."""
        return self.ensemble or self.single

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.level == "error"]

    def error(self, file: str, message: str) -> None:
        self.findings.append(Finding("error", file, message))

    def warning(self, file: str, message: str) -> None:
        self.findings.append(Finding("warning", file, message))

    def lines(self) -> list[str]:
        out = [f.line(self.archive) for f in self.findings]
        if self.ok and self.single is not None:
            out.append(f"{self.archive}: ok: single model {self.single!r} ({self.configs[self.single].served}), "
                       "served as the TargetModel")
        elif self.ok:
            out.append(f"{self.archive}: ok: ensemble {self.ensemble!r}, {self.models} model folders")
        return out

    def summary(self) -> str:
        """The errors on one line, for refusing the archive elsewhere (deploy, replay)."""
        first = "; ".join(f"{f.file or 'archive'}: {f.message}" for f in self.errors[:3])
        more = f" (and {len(self.errors) - 3} more)" if len(self.errors) > 3 else ""
        return f"{self.archive} fails `conch check`: {first}{more}"


@dataclass
class Model:
    """One model folder and its config, as the typed reader read it."""

    folder: str
    path: Path
    text: str
    config: ReadConfig
    prefix: str = ""  # where its files are in the archive: ``folder/``, or nothing for a root config.pbtxt

    @property
    def kind(self) -> str:
        return self.config.served
