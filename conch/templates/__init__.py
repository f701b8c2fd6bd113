"""The jinja2 templates conch renders: config.pbtxt, the Python-backend model.py, stand-in runners."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from google.protobuf import text_encoding

if TYPE_CHECKING:
    import jinja2

TEMPLATE_DIR = Path(__file__).parent


def pbtxt_string(value: object) -> str:
    """A protobuf text-format string literal: every control character escaped, so it parses back whole."""
    return f'"{text_encoding.CEscape(str(value), as_utf8=True)}"'


def _pylist(values: object) -> str:
    return repr(list(values))  # type: ignore[call-overload]


@cache
def environment() -> jinja2.Environment:
    import jinja2  # ~0.015 s: only commands that render pay it

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
        bytecode_cache=_bytecode_cache(),
        auto_reload=False,  # the templates are conch's own files: not looked at again on every render
    )
    env.filters["q"] = pbtxt_string
    env.filters["pylist"] = _pylist
    env.filters["pyrepr"] = repr
    return env


def _bytecode_cache() -> jinja2.BytecodeCache | None:
    """Compiled templates kept between runs (keyed by the template's source; jinja2's folder in the temp dir,
    private to the user): compiling them again was ~0.03 s of every build process. None (compile each
    time) where that folder cannot be made safely."""
    import jinja2

    try:
        return jinja2.FileSystemBytecodeCache()
    except (OSError, RuntimeError):
        return None


def render(template: str, **context: Any) -> str:
    """Render one template with the values computed by the caller."""
    return environment().get_template(template).render(**context)
