"""The example archives, member by member, are what the builder wrote when this fixture was recorded: a
refactor of the builder keeps every name, mode, size and content digest (tests/fixtures/example_archives.json).

What a clean machine makes differently is not the builder's output and is left out of the comparison: a packed
environment depends on the package index (its tarball is compared by name, its key hidden in every name and
text that holds it, the manifest's digest of such a text taken over the text with the key hidden, its pins
and key dropped from the manifest), and what an in-process run of the models
computes may differ in the last bits on another CPU (warmup data files by size, sample expected values by
datatype and shape). Every entry's mtime and owner are fixed, whatever the machine.

To record the fixture again after an intended change of the archives:
``python tests/builder/test_example_archives.py <folder with production/ and local/ archives>``."""

from __future__ import annotations

import hashlib
import json
import re
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent))  # conftest's helpers when run as a script

from conftest import EXAMPLE_FILES, ExampleArchives

from conch.builder.archive import FIXED_MTIME
from conch.errors import BuildError

FIXTURE = Path(__file__).parent.parent / "fixtures" / "example_archives.json"
MANIFEST = "conch-manifest.json"
ENV_KEY = re.compile(r"(conch-envs/[A-Za-z0-9_.]+(?:-[A-Za-z0-9_.]+)*?)-[0-9a-f]{12}")


def _hidden_keys(text: str) -> str:
    return ENV_KEY.sub(r"\1-<key>", text)


def _manifest_digest(data: bytes, keyed: dict[str, tuple[str, str]]) -> str:
    """The manifest without what the package index or the CPU decides (see the module's docstring).
    ``keyed``: each text that names an environment's key, as its digest and the digest with the key hidden."""
    manifest = json.loads(data)
    manifest["environments"] = {_hidden_keys(rel): {k: v for k, v in env.items() if k not in ("pins", "key")}
                                for rel, env in manifest["environments"].items()}
    files = {}
    for name, digest in manifest["files"].items():
        if name in keyed:
            assert digest == keyed[name][0], f"the manifest's digest of {name} is not its content's"
            digest = keyed[name][1]
        files[_hidden_keys(name)] = None if _machine_made(name) else digest
    manifest["files"] = files
    for sample in manifest["samples"]:
        sample["expected"] = {k: {"datatype": v["datatype"], "shape": v["shape"]}
                              for k, v in sample["expected"].items()}
    canonical = _hidden_keys(json.dumps(manifest, sort_keys=True))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _machine_made(name: str) -> bool:
    """Members whose bytes come from the package index or from running the models on this CPU."""
    return name.startswith("conch-envs/") or "/warmup/" in name


def members(archive: Path) -> dict[str, dict[str, Any]]:
    """Each entry of an archive: its type, mode and, for a file, its size and content digest (as the
    module's docstring says for the entries a clean machine makes differently)."""
    out: dict[str, dict[str, Any]] = {}
    manifest = b""
    keyed: dict[str, tuple[str, str]] = {}
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            assert (member.mtime, member.uid, member.gid, member.uname, member.gname) == (FIXED_MTIME, 0, 0, "", ""), (
                f"{archive.name}: {member.name} has mtime {member.mtime}, owner {member.uid}:{member.gid} "
                f"{member.uname!r}:{member.gname!r}")
            entry: dict[str, Any] = {"type": member.type.decode(), "mode": oct(member.mode)}
            name = _hidden_keys(member.name)
            if member.issym():
                entry["link"] = member.linkname
            elif member.isfile():
                handle = tar.extractfile(member)
                assert handle is not None
                data = handle.read()
                if name == MANIFEST:
                    manifest = data
                elif name.endswith(".pbtxt"):
                    text = _hidden_keys(data.decode()).encode()
                    entry |= {"size": len(text), "sha256": hashlib.sha256(text).hexdigest()}
                    keyed[member.name] = (hashlib.sha256(data).hexdigest(), entry["sha256"])
                elif member.name.startswith("conch-envs/"):
                    pass  # the packed environment: its name says it is there
                elif _machine_made(name):
                    entry["size"] = member.size
                else:
                    entry |= {"size": member.size, "sha256": hashlib.sha256(data).hexdigest()}
            out[name] = entry
    out[MANIFEST]["sha256"] = _manifest_digest(manifest, keyed)
    return out


def _recorded() -> dict[str, Any]:
    recorded: dict[str, Any] = json.loads(FIXTURE.read_text())
    return recorded


# Packing text_embeddings' environment for the production Python takes minutes on a 2-core machine (as in
# test_check): that one runs with -m slow; the local builds are shared with test_check and test_run.
EVERY_EXAMPLE = [pytest.param(f, t, marks=[pytest.mark.slow] if (f, t) == ("text_embeddings.py", "production") else [])
                 for f in EXAMPLE_FILES for t in ("production", "local")]


@pytest.mark.integration  # packs the examples' environments: resolves against the package index
@pytest.mark.parametrize(("file", "target"), EVERY_EXAMPLE)
def test_example_archive_members_are_as_recorded(file: str, target: str, examples: ExampleArchives) -> None:
    recorded = _recorded()[target]
    name = file.removesuffix(".py")
    try:
        archive = examples.archive(file, target)
    except BuildError as exc:  # a TensorRT plan is compiled on a GPU host only
        assert (file, target) == ("resnet_tensorrt.py", "production"), exc
        assert "needs an NVIDIA GPU" in str(exc), exc
        assert name not in recorded
        return
    found, expected = members(archive), recorded[name]
    assert sorted(found) == sorted(expected), f"{archive.name}: members differ from the recorded ones"
    differ = {n: (expected[n], found[n]) for n in expected if found[n] != expected[n]}
    assert not differ, f"{archive.name}: members differ from the recorded ones (recorded, built): {differ}"


def _record(root: Path) -> None:
    fixture = {target: {archive.name.removesuffix(".tar.gz"): members(archive)
                        for archive in sorted((root / target).glob("*.tar.gz"))}
               for target in ("production", "local")}
    FIXTURE.write_text(json.dumps(fixture, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    _record(Path(sys.argv[1]))
