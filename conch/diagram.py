"""Pictures of an ensemble's DAG: Graphviz dot (rendered to SVG or PNG through the Graphviz that the
pygraphviz wheel bundles) and Mermaid text for READMEs. Each step shows its Triton backend, instance group
and batching; each edge the tensor it carries, with its dtype and dims (without the batch dimension)."""

from __future__ import annotations

import html
import os
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from conch.errors import BuildError, GraphvizMissing

RENDERED = ("svg", "png")
SUFFIX = {"dot": ".dot", "mermaid": ".mmd", "svg": ".svg", "png": ".png"}  # each format's file ending
FORMATS = tuple(SUFFIX)
INSTALL_HINT = "pip install 'conch[graph]' (the pygraphviz wheel, which bundles Graphviz; no system package)"


@dataclass(frozen=True)
class Node:
    id: str
    shape: str  # "tensor" (an ensemble input or output) or "step"
    lines: tuple[str, ...]  # the first is the name
    fill: str = ""  # a colour such as "#fcbba1" instead of the default (e.g. a step's share of the time)
    bold: bool = False  # drawn with a heavy border (e.g. a step on the critical path)


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    label: str


@dataclass(frozen=True)
class Graph:
    name: str
    title: str
    nodes: tuple[Node, ...]
    edges: tuple[Edge, ...]


def dims_text(dims: Sequence[int]) -> str:
    return "[" + ", ".join(str(d) for d in dims) + "]"


def _dot_quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def to_dot(g: Graph) -> str:
    """Graphviz dot text, left to right; steps are boxes, ensemble inputs and outputs ovals."""
    lines = [f"digraph {_dot_quote(g.name)} {{", "  rankdir=LR;",
             f"  label={_dot_quote(g.title)}; labelloc=t; fontname=\"Helvetica,Arial,sans-serif\";",
             '  node [fontname="Helvetica,Arial,sans-serif", fontsize=11];',
             '  edge [fontname="Helvetica,Arial,sans-serif", fontsize=9];']
    for node in g.nodes:
        name, *rest = (html.escape(line) for line in node.lines)  # an HTML-like label: the name in bold
        label = f'<<B>{name}</B><BR/><FONT POINT-SIZE="10">{"<BR/>".join(rest)}</FONT>>'
        style = (f'shape=box, style="rounded,filled", fillcolor="{node.fill or "#e8f0fe"}"' if node.shape == "step"
                 else "shape=oval")
        if node.bold:
            style += ", penwidth=3"
        lines.append(f"  {_dot_quote(node.id)} [{style}, label={label}];")
    lines.extend(f"  {_dot_quote(e.source)} -> {_dot_quote(e.target)} [label={_dot_quote(e.label)}];"
                 for e in g.edges)
    lines.append("}")
    return "\n".join(lines) + "\n"


def _mermaid_text(text: str) -> str:
    # Mermaid's entity escapes (#quot; ...) keep quotes and its own '#' from ending or breaking a label.
    return text.replace("#", "#35;").replace('"', "#quot;").replace("<", "#lt;").replace(">", "#gt;")


def to_mermaid(g: Graph) -> str:
    """A Mermaid flowchart (GitHub renders it in a ```mermaid block); node ids are generated, since step
    and tensor names may hold characters Mermaid's ids cannot."""
    ids = {node.id: f"n{i}" for i, node in enumerate(g.nodes)}
    lines = ["flowchart LR", f"  %% {g.title}"]
    for node in g.nodes:
        name, *rest = (_mermaid_text(line) for line in node.lines)
        label = "<br/>".join([f"<b>{name}</b>" if node.shape == "step" else name, *rest])
        lines.append(f'  {ids[node.id]}["{label}"]' if node.shape == "step" else f'  {ids[node.id]}(["{label}"])')
    lines.extend(f'  {ids[e.source]} -->|"{_mermaid_text(e.label)}"| {ids[e.target]}' for e in g.edges)
    lines.extend(f"  style {ids[n.id]} fill:{n.fill}" + (",stroke-width:3px" if n.bold else "")
                 for n in g.nodes if n.fill or n.bold)
    return "\n".join(lines) + "\n"


def render(dot: str, fmt: str) -> bytes:
    """``dot`` laid out by Graphviz's dot engine as SVG or PNG; GraphvizMissing saying how to get it."""
    if fmt not in RENDERED:
        raise BuildError(f"cannot render {fmt!r}; choose one of {', '.join(RENDERED)}")
    try:
        import pygraphviz
    except ImportError:
        raise GraphvizMissing(f"rendering {fmt} needs Graphviz: {INSTALL_HINT}") from None
    with _fontconfig_chatter_dropped():
        return bytes(pygraphviz.AGraph(string=dot).draw(format=fmt, prog="dot", args="-Gdpi=144" if fmt == "png"
                                                         else ""))


def picture(g: Graph, fmt: str) -> tuple[str, bytes, GraphvizMissing | None]:
    """``g`` in one of FORMATS: (the format written, its bytes, why it is not the one asked for). Where
    Graphviz is missing an SVG or PNG is the dot text instead, with the GraphvizMissing saying so."""
    text = to_mermaid(g) if fmt == "mermaid" else to_dot(g)
    if fmt in RENDERED:
        try:
            return fmt, render(text, fmt), None
        except GraphvizMissing as exc:
            return "dot", text.encode(), exc
    return fmt, text.encode(), None


def share_colour(share: float) -> str:
    """A fill from pale to deep red as ``share`` (of a request's time) goes from 0 to 1."""
    pale, deep = (0xFF, 0xF5, 0xF0), (0xCB, 0x18, 0x1D)
    t = min(max(share, 0.0), 1.0)
    return "#" + "".join(f"{round(a + (b - a) * t):02x}" for a, b in zip(pale, deep, strict=True))


@contextmanager
def _fontconfig_chatter_dropped() -> Iterator[None]:
    """The wheel's fontconfig warns on stderr about newer system font configs it cannot read (harmless:
    it falls back to the fonts it finds); every other line Graphviz writes there is passed on."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            caught.seek(0)
            for line in caught.read().decode(errors="replace").splitlines():
                if not line.startswith("Fontconfig "):
                    print(line, file=sys.stderr)


def mime_bundle(g: Graph) -> dict[str, str]:
    """How an ensemble's DAG displays in Jupyter: as SVG laid out by Graphviz; where Graphviz is missing, its
    Mermaid flowchart in a Markdown fence (JupyterLab 4.1+ draws it) and, as text, the steps and the edges."""
    try:
        return {"image/svg+xml": render(to_dot(g), "svg").decode()}
    except GraphvizMissing:
        # as text: the title, each step with its settings, then each edge
        lines = [g.title]
        lines += [f"  {' | '.join(n.lines)}" for n in g.nodes if n.shape == "step"]
        names = {n.id: n.lines[0] for n in g.nodes}
        lines += [f"  {names[e.source]} -> {names[e.target]}: {e.label}" for e in g.edges]
        return {"text/markdown": f"```mermaid\n{to_mermaid(g)}```\n", "text/plain": "\n".join(lines)}
