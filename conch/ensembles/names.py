"""Triton's naming rules for models and tensors, checked where a name is declared."""

from __future__ import annotations

import re

from conch.errors import DeclarationError

# Characters the Triton server (and a shell or an S3 key on the way) refuses or mangles in model names.
FORBIDDEN_MODEL_CHARS = set(";|&$`<>()[]{}\"'*?~#!")
_WHITESPACE = re.compile(r"\s")


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
    if _WHITESPACE.search(name) or "/" in name or "\\" in name or name.startswith("."):
        raise DeclarationError(
            f"{what}: name {name!r} is not a valid folder name (no whitespace, slashes, or leading '.'); "
            "use letters, digits, '_', '-' and '.'."
        )
    if name.isdigit():
        raise DeclarationError(f"{what}: name {name!r} is all digits, which Triton reads as a version folder")
    return name


def check_tensor_name(name: str, what: str) -> str:
    """Return ``name`` if it can be a tensor name in a config.pbtxt; raise naming the offence."""
    if not isinstance(name, str) or not name:
        raise DeclarationError(f"{what}: a tensor name must be a non-empty string, got {name!r}")
    bad = sorted({c for c in name if c in FORBIDDEN_MODEL_CHARS or c == "\\"})
    if bad or _WHITESPACE.search(name):
        raise DeclarationError(
            f"{what}: tensor name {name!r} contains {''.join(bad) or 'whitespace'!r}; use letters, digits, "
            "'_', '-', '.', ':' and '/' only."
        )
    return name
