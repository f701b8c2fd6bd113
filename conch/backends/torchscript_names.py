"""TorchScript type names in a saved model.pt that do not depend on what the process compiled before.

TorchScript names every module type, script class and function it compiles after its Python qualified
name, in one compilation unit per process. A second type with a taken name is renamed
``prefix.___torch_mangle_N.Name`` with N from a process-wide counter, so the same model traced after
another module of the same class (a build of several ensembles, a notebook, a test session) is saved
under other names: other text in ``code/``, other class references in ``data.pkl``, other file names.

``canonical_names`` renames every type of a saved archive the way a fresh process would number them,
with the order taken from the model's structure instead of the process's history: types in the order
``data.pkl`` builds their objects, then the order their code refers to them; the first type of each
Python name keeps it bare, the next ones are mangled 0, 1, ... Each code file is then written again
from its definitions in that order, so two types that moved between files land the same way too, and
a scripted module's constants in sorted order (torch collects them in a set, whose order follows
Python's per-process string hashing), and unnamed temporaries numbered per definition (torch numbers them
per file). Left as torch prints them: a local whose name collided with another in its method gets a
suffix from a per-file counter too (``input0``); telling those from names that end in digits would be
guesswork, and no model tested here has one that differs.
"""

from __future__ import annotations

import pickletools
import re
import struct
from collections.abc import Iterable, Mapping

CODE = "code/"
MANGLE = "___torch_mangle_"
_QUALIFIED = re.compile(r"__torch__(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
_TEMPORARY = re.compile(r"(?<![\w.\"'])_\d+\b")
_ATTRIBUTE = re.compile(r"  [A-Za-z_][A-Za-z0-9_]* : ")
_CONSTANT = re.compile(r"  [A-Za-z_][A-Za-z0-9_]* : Final\[")
_DEFINITION = re.compile(r"(?:class|def) ([A-Za-z_][A-Za-z0-9_]*)\b")


def canonical_names(records: Mapping[str, bytes]) -> dict[str, bytes] | None:
    """The records of a saved archive (names without the root folder, in archive order) with canonical
    type names and code files, or None when the archive holds something this does not know how to
    rename (then its bytes are left as torch wrote them)."""
    definitions = _definitions(records)
    if definitions is None:
        return None
    order = _canonical_order(records, definitions)
    if order is None:
        return None
    renamed = _renaming(order)
    out: dict[str, bytes] = {}
    for name, data in records.items():
        if name.startswith(CODE) and name.endswith(".py"):
            if not any(n.startswith(CODE) for n in out):
                out.update(_code_files(order, definitions, renamed))
            continue
        if name.endswith(".pkl"):
            rewritten = _pickle_renamed(data, renamed)
            if rewritten is None:
                return None
            out[name] = rewritten
        else:
            out[name] = data
    return out


def _definitions(records: Mapping[str, bytes]) -> dict[str, str] | None:
    """Each top-level class or function of the code files by its qualified name: its text."""
    found: dict[str, str] = {}
    for name, data in records.items():
        if not (name.startswith(CODE) and name.endswith(".py")):
            continue
        qualifier = name[len(CODE):-len(".py")].replace("/", ".")
        chunks = re.split(r"\n(?=\S)", data.decode())
        for chunk in chunks:
            match = _DEFINITION.match(chunk)
            if match is None:
                return None  # a statement outside any definition: not a layout this rewrites
            found[f"{qualifier}.{match.group(1)}"] = _temporaries_renumbered(_constants_sorted(chunk.rstrip("\n")))
    return found


def _temporaries_renumbered(definition: str) -> str:
    """The printer's unnamed temporaries (``_0``, ``_1``, ...) numbered from 0 in order of appearance: torch
    numbers them on through every definition of a code file, so they depended on which file a type landed in.
    Attributes (``self._3``, ``"_3"``) and class-level declarations keep their names."""
    numbers: dict[str, str] = {}

    def one(match: re.Match[str]) -> str:
        return numbers.setdefault(match.group(0), f"_{len(numbers)}")

    lines = definition.split("\n")
    return "\n".join(line if _ATTRIBUTE.match(line) else _TEMPORARY.sub(one, line) for line in lines)


def _constants_sorted(definition: str) -> str:
    """A class's ``name : Final[...] = value`` lines sorted: torch.jit.script collects a module's
    constants in a set, so their order follows Python's per-process string hashing."""
    lines = definition.split("\n")
    out: list[str] = []
    run: list[str] = []
    for line in [*lines, ""]:
        if _CONSTANT.match(line):
            run.append(line)
            continue
        out += sorted(run)
        run = []
        out.append(line)
    return "\n".join(out[:-1])


def _canonical_order(records: Mapping[str, bytes], definitions: Mapping[str, str]) -> list[str] | None:
    """Every defined name: first those the pickles name, in their order, then those each one's code
    refers to, breadth first; None if a mangled name refers to nothing defined."""
    order: list[str] = []
    seen: set[str] = set()

    def visit(names: Iterable[str]) -> bool:
        for name in names:
            target = _defined_prefix(name, definitions)
            if target is None:
                if MANGLE in name:
                    return False
                continue
            if target not in seen:
                seen.add(target)
                order.append(target)
        return True

    for name, data in records.items():
        if name.endswith(".pkl") and not visit(_pickled_names(data)):
            return None
    index = 0
    while index < len(order):
        if not visit(m.group(0) for m in _QUALIFIED.finditer(definitions[order[index]])):
            return None
        index += 1
    visit(definitions)  # not reachable from the model (none expected): in archive order, last
    return order


def _defined_prefix(name: str, definitions: Mapping[str, str]) -> str | None:
    """The longest leading part of a dotted name that is defined (``a.B.__init__`` refers to ``a.B``)."""
    atoms = name.split(".")
    for end in range(len(atoms), 1, -1):
        candidate = ".".join(atoms[:end])
        if candidate in definitions:
            return candidate
    return None


def _renaming(order: list[str]) -> dict[str, str]:
    """Each name to its canonical one: the first of each unmangled name bare, then mangled 0, 1, ..."""
    renamed: dict[str, str] = {}
    taken: set[str] = set()
    counter = 0
    for name in order:
        parts = [p for p in name.split(".") if not p.startswith(MANGLE)]
        bare = ".".join(parts)
        if bare not in taken:
            renamed[name] = bare
            taken.add(bare)
            continue
        renamed[name] = ".".join([*parts[:-1], f"{MANGLE}{counter}", parts[-1]])
        counter += 1
    return renamed


def _rename_text(text: str, renamed: Mapping[str, str]) -> str:
    def one(match: re.Match[str]) -> str:
        name = match.group(0)
        target = _defined_prefix(name, renamed)
        return name if target is None else renamed[target] + name[len(target):]

    return _QUALIFIED.sub(one, text)


def _code_files(order: list[str], definitions: Mapping[str, str], renamed: Mapping[str, str]) -> dict[str, bytes]:
    """The code files again: each definition in the file of its new name, files and definitions in
    canonical order."""
    files: dict[str, list[str]] = {}
    for name in order:
        qualifier = renamed[name].rsplit(".", 1)[0]
        files.setdefault(qualifier, []).append(_rename_text(definitions[name], renamed))
    return {CODE + q.replace(".", "/") + ".py": ("\n".join(chunks) + "\n").encode() for q, chunks in files.items()}


def _pickled_names(data: bytes) -> Iterable[str]:
    for opcode, arg, _ in pickletools.genops(data):
        if opcode.name == "GLOBAL":
            yield str(arg).replace(" ", ".")
        elif opcode.name in ("BINUNICODE", "SHORT_BINUNICODE"):
            yield from (m.group(0) for m in _QUALIFIED.finditer(str(arg)))


def _pickle_renamed(data: bytes, renamed: Mapping[str, str]) -> bytes | None:
    """The pickle with its class references and strings renamed, every other byte kept; None if a
    mangled name sits in an opcode this does not rewrite."""
    ops = list(pickletools.genops(data))
    out = bytearray()
    for (opcode, arg, start), end in zip(ops, [pos for _, _, pos in ops[1:]] + [len(data)], strict=True):
        raw = data[start:end]
        if opcode.name == "GLOBAL":
            module, name = _rename_text(str(arg).replace(" ", "."), renamed).rsplit(".", 1)
            raw = b"c" + module.encode() + b"\n" + name.encode() + b"\n"
        elif opcode.name in ("BINUNICODE", "SHORT_BINUNICODE"):
            text = _rename_text(str(arg), renamed).encode()
            raw = b"X" + struct.pack("<I", len(text)) + text if text != str(arg).encode() else raw
        elif MANGLE.encode() in raw:
            return None
        out += raw
    return bytes(out)
