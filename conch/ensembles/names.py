"""Triton's naming rules for models and tensors, checked where a name is declared.

Model names become folder names that reach a shell (Triton starts Python stubs through `bash -c`), S3 keys
and file names, and the Python stub encodes them as ASCII: so they are ASCII letters, digits, '_', '-' and
'.', exactly as the messages say.
"""

from __future__ import annotations

import re

from conch.errors import DeclarationError

# Characters the Triton server (and a shell or an S3 key on the way) refuses or mangles in model names.
FORBIDDEN_MODEL_CHARS = frozenset(";|&$`<>()[]{}\"'*?~#!")
MODEL_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
TENSOR_NAME = re.compile(r"[A-Za-z0-9_.:/-]+")
# The archive is <name>.tar.gz, written through a temp file `.<name>.tar.gz.XXXXXXXX.part`: 255 bytes at most.
MAX_MODEL_NAME = 128
# Files conch writes at the archive root, beside the model folders (conch.builder.envs / manifest).
RESERVED_NAMES = ("conch-envs", "conch-manifest.json")


def _shown(name: str) -> str:
    return ascii(name) if not name.isascii() or not name.isprintable() else repr(name)


def check_model_name(name: str, what: str) -> str:
    """Return ``name`` if Triton accepts it as a model (folder) name; raise naming the offence."""
    if not isinstance(name, str) or not name:
        raise DeclarationError(f"{what}: a model name must be a non-empty string, got {name!r}")
    bad = sorted({c for c in name if c in FORBIDDEN_MODEL_CHARS})
    if bad:
        raise DeclarationError(
            f"{what}: name {name!r} contains {''.join(bad)!r}; Triton model names may not contain any of "
            f"{''.join(sorted(FORBIDDEN_MODEL_CHARS))!r}. Use letters, digits, '_', '-' and '.'."
        )
    if not MODEL_NAME.fullmatch(name):
        raise DeclarationError(
            f"{what}: name {_shown(name)} is not a safe folder name (ASCII letters, digits, '_', '-' and '.' only, "
            "not starting with '.' or '-'; no whitespace, slashes or control characters); rename it"
        )
    if name.isdigit():
        raise DeclarationError(f"{what}: name {name!r} is all digits, which Triton reads as a version folder")
    if len(name) > MAX_MODEL_NAME:
        raise DeclarationError(
            f"{what}: name {name[:20]!r}... is {len(name)} characters; keep model names to {MAX_MODEL_NAME} (folders "
            "and the archive file are named after them)"
        )
    if name in RESERVED_NAMES:
        raise DeclarationError(f"{what}: name {name!r} is the name of a file conch writes in every archive; rename it")
    return name


def check_tensor_name(name: str, what: str) -> str:
    """Return ``name`` if it can be a tensor name in a config.pbtxt; raise naming the offence."""
    if not isinstance(name, str) or not name:
        raise DeclarationError(f"{what}: a tensor name must be a non-empty string, got {name!r}")
    if not TENSOR_NAME.fullmatch(name):
        bad = "".join(sorted({c for c in name if not TENSOR_NAME.fullmatch(c)}))
        raise DeclarationError(
            f"{what}: tensor name {_shown(name)} contains {_shown(bad)}; use ASCII letters, digits, "
            "'_', '-', '.', ':' and '/' only."
        )
    return name
