"""The instance's disk as SageMaker uses it for an MME: each TargetModel's archive is downloaded and unpacked
into a folder of its own, which stays after the model is unloaded (a reload skips the download) until the
disk budget needs the room."""

from __future__ import annotations

import hashlib
import os
import shutil
import tarfile
import tempfile
import zlib
from pathlib import Path

from conch.archive.extract import safe_extract
from conch.archive.verify import check_folder
from conch.compiler.config_reader import ReadConfig
from conch.endpoint.protocol import EndpointError, ValidationError
from conch.endpoint.sources import ModelSource
from conch.errors import ConchError
from conch.triton.mme_contract import root_model_staged

Configs = dict[str, ReadConfig]  # {model folder: its config.pbtxt as the check read it (the typed reader)}


def folder_bytes(folder: Path) -> int:
    """Bytes of the regular files under ``folder`` (links are not followed)."""
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            if not os.path.islink(path):
                total += os.path.getsize(path)
    return total


class DiskCache:
    """Unpacked archives under ``root``, one fresh folder per download (a folder is never reused, so a
    folder being deleted never collides with one being filled)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)

    def fetch(self, target_model: str, source: ModelSource) -> tuple[Path, int, Configs]:
        """Download and unpack ``target_model``; (its folder, its size on disk, its configs as the check parsed
        them). Refusals are ValidationErrors naming the TargetModel and the cause; nothing is left behind on
        failure."""
        tag = hashlib.sha256(target_model.encode()).hexdigest()[:16]
        folder = Path(tempfile.mkdtemp(prefix=f"{tag}-", dir=self.root))
        archive = folder.with_suffix(".tar.gz")
        try:
            source.fetch(target_model, archive)
            configs = unpack(target_model, archive, folder / "model")
            root_model_staged(folder / "model")  # a config.pbtxt at the root: the model in model/model/
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        finally:
            archive.unlink(missing_ok=True)
        return folder / "model", folder_bytes(folder), configs

    def remove(self, model_folder: Path) -> None:
        shutil.rmtree(model_folder.parent, ignore_errors=True)


def unpack(target_model: str, archive: Path, dest: Path) -> Configs:
    """Unpack through conch's one safe extraction; turn every refusal into a ValidationError for the caller.
    Each model folder's config as `conch check` parsed it (the staging reads them, so none is parsed twice)."""
    dest.mkdir()
    try:
        safe_extract(archive, dest)
    except EndpointError:
        raise
    except ConchError as exc:
        cause = str(exc).replace(str(archive), target_model)  # the cache's temp path says nothing to the user
        raise ValidationError(f"TargetModel {target_model!r}: {cause}") from None
    except (tarfile.TarError, EOFError, zlib.error, OSError, ValueError) as exc:
        raise ValidationError(
            f"TargetModel {target_model!r}: the archive is not a readable .tar.gz ({type(exc).__name__}: {exc}); "
            "upload it again, e.g. from `conch build`"
        ) from None
    if not any(p.is_dir() for p in dest.iterdir()) and not (dest / "config.pbtxt").is_file():
        raise ValidationError(f"TargetModel {target_model!r}: the archive holds no model folder at its root")
    report = check_folder(dest, target_model)  # e.g. folder names that would reach the stub's shell
    if not report.ok:
        raise ValidationError(f"TargetModel {report.summary()}")
    return report.configs
