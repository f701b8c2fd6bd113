"""The imports of Python source files, and whether each compiles, as one interpreter sees them. Runs in conch's
process or, as a script, under the release's own Python (``python import_scan.py`` with a JSON list of paths on
stdin, a JSON object on stdout): so it imports the standard library only and keeps to Python 3.8's syntax."""

import ast
import json
import sys

# An import under a handler of one of these (or a bare except) is optional: the code goes on without it
OPTIONAL_HANDLERS = ("ImportError", "ModuleNotFoundError", "Exception", "BaseException")


def scan_source(source, filename, feature_version=None):
    """``{"error": message}`` when the source does not compile here, else ``{"imports": [[line, module,
    optional], ...]}`` (absolute imports; optional: under try/except ImportError, ``if TYPE_CHECKING`` or a test
    of ``sys.version_info``). ``feature_version`` (a minor version): parse with that older Python's grammar, as
    far as this one's parser can tell (``ast.parse``'s best effort)."""
    try:
        tree = ast.parse(source, filename, feature_version=feature_version)
        compile(tree, filename, "exec", dont_inherit=True)  # what the parser accepts but the compiler refuses
    except (SyntaxError, ValueError) as exc:
        where = f" (line {exc.lineno})" if getattr(exc, "lineno", None) else ""
        return {"error": f"{type(exc).__name__}: {getattr(exc, 'msg', None) or exc}{where}"}
    found = []
    _walk(tree, False, found)
    return {"imports": found}


def _walk(node, optional, found):
    if isinstance(node, ast.Import):
        found.extend([node.lineno, alias.name, optional] for alias in node.names)
        return
    if isinstance(node, ast.ImportFrom):
        if not node.level and node.module and node.module != "__future__":
            found.append([node.lineno, node.module, optional])
        return
    if isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
        guarded = optional or any(_catches_import_error(h) for h in node.handlers)
        for child in node.body:
            _walk(child, guarded, found)
        for child in node.handlers + node.orelse + node.finalbody:
            _walk(child, optional, found)
        return
    if isinstance(node, ast.If) and _conditional(node.test):
        for child in node.body + node.orelse:
            _walk(child, True, found)
        return
    for child in ast.iter_child_nodes(node):
        _walk(child, optional, found)


def _catches_import_error(handler):
    if handler.type is None:
        return True
    kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any((k.id if isinstance(k, ast.Name) else getattr(k, "attr", "")) in OPTIONAL_HANDLERS for k in kinds)


def _conditional(test):
    """A test that decides by the Python version or typing's TYPE_CHECKING."""
    names = {n.id for n in ast.walk(test) if isinstance(n, ast.Name)}
    names |= {n.attr for n in ast.walk(test) if isinstance(n, ast.Attribute)}
    return bool(names & {"version_info", "TYPE_CHECKING", "hexversion"})


def scan_files(paths, feature_version=None):
    """``{path: scan_source(...)}`` for each file (a file that cannot be read: its error)."""
    out = {}
    for path in paths:
        try:
            with open(path, "rb") as fh:
                source = fh.read()
        except OSError as exc:
            out[path] = {"error": f"cannot be read: {exc}"}
            continue
        out[path] = scan_source(source, path, feature_version)
    return out


if __name__ == "__main__":
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    json.dump({"python": version, "files": scan_files(json.load(sys.stdin))}, sys.stdout)
