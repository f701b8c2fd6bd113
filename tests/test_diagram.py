"""`conch graph`: what each picture says (backend, instance groups, batching, tensors' dtype and dims),
Mermaid text GitHub can render, and SVG/PNG rendered by the Graphviz the pygraphviz wheel bundles, or the
dot text and one clear warning where it is missing."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conch.builder.discover import discover
from conch.diagram import to_dot, to_mermaid

FIXTURES = Path(__file__).parent / "fixtures"
PICTURED = FIXTURES / "graph_ensembles" / "pictured.py"
# The renderer is part of `pip install -e '.[dev]'` (the `graph` extra); its absence fails these tests.
INSTALL = "the Graphviz renderer is missing: pip install -e '.[dev]' (or pip install 'conch[graph]')"


def conch(*args: str, path: str | None = None, block_pygraphviz: bool = False) -> subprocess.CompletedProcess[str]:
    """`conch` in a process of its own; ``path`` replaces PATH; ``block_pygraphviz`` makes its import fail
    there, as on a machine where the `graph` extra is not installed."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(FIXTURES), os.environ.get("PYTHONPATH", "")])}
    if path is not None:
        env["PATH"] = path
    block = "sys.modules['pygraphviz'] = None; " if block_pygraphviz else ""
    code = f"import sys; {block}from conch.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300, env=env)


@pytest.fixture(scope="module")
def pictured() -> object:
    sys.path.insert(0, str(FIXTURES))
    try:
        (ensemble,) = discover([PICTURED])
    finally:
        sys.path.remove(str(FIXTURES))
    return ensemble.graph()


def test_steps_show_backend_instances_and_batching_and_edges_their_tensors(pictured: object) -> None:
    nodes = {n.id: n.lines for n in pictured.nodes}  # type: ignore[attr-defined]
    assert nodes["double"] == ("double", "python", "instances: 2 × KIND_GPU, 1 × KIND_CPU",
                               "max_batch_size 8, dynamic [4, 8] delay 100 us")
    assert nodes["add_one"] == ("add_one", "python", "instances: default", "max_batch_size 8")
    assert nodes["in:X"] == ("X", "FP32 [4]") and nodes["out:SUM"] == ("SUM", "FP32 [4]")
    edges = {(e.source, e.target, e.label) for e in pictured.edges}  # type: ignore[attr-defined]
    assert edges == {
        ("in:X", "double", "X → x: FP32 [4]"),
        ("double", "add_one", "y: FP32 [4]"),
        ("double", "split_sum", "y → a: FP32 [4]"),
        ("add_one", "split_sum", "scores/z → b: FP32 [4]"),
        ("split_sum", "out:SUM", "sum → SUM: FP32 [4]"),
        ("split_sum", "out:DIFF", "diff → DIFF: FP32 [4]"),
    }
    assert pictured.title == "ensemble pictured (max_batch_size 8)"  # type: ignore[attr-defined]


def test_mermaid_is_a_flowchart_github_renders(pictured: object) -> None:
    text = to_mermaid(pictured)  # type: ignore[arg-type]
    lines = text.splitlines()
    assert lines[0] == "flowchart LR" and lines[1] == "  %% ensemble pictured (max_batch_size 8)"
    defined = {}
    edges = []
    for line in lines[2:]:
        node = re.fullmatch(r'  (n\d+)(\["(.*)"\]|\(\["(.*)"\]\))', line)
        edge = re.fullmatch(r'  (n\d+) -->\|"([^"]*)"\| (n\d+)', line)
        assert node or edge, f"not a Mermaid node or edge: {line!r}"
        if node:
            label = node.group(3) or node.group(4)
            assert '"' not in label, line  # a quote would end the label early
            defined[node.group(1)] = label
        else:
            edges.append((edge.group(1), edge.group(2), edge.group(3)))  # type: ignore[union-attr]
    assert len(defined) == 6 and len(edges) == 6
    assert all(a in defined and b in defined for a, _, b in edges)  # every edge joins declared nodes
    assert "<b>double</b><br/>python<br/>instances: 2 × KIND_GPU, 1 × KIND_CPU" in defined["n1"]
    assert ("n2", "scores/z → b: FP32 [4]", "n3") in edges  # '/' needs no escape inside a quoted label


def test_dot_text_is_the_default_and_keeps_step_names_as_node_ids(pictured: object) -> None:
    dot = to_dot(pictured)  # type: ignore[arg-type]
    assert dot.startswith('digraph "pictured" {') and '"double" -> "add_one" [label="y: FP32 [4]"];' in dot
    result = conch("graph", str(PICTURED))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == dot.strip() and result.stderr == ""


@pytest.mark.parametrize(("fmt", "magic"), [("svg", b"<?xml"), ("png", b"\x89PNG\r\n\x1a\n")])
def test_svg_and_png_render_without_a_graphviz_binary_on_path(tmp_path: Path, fmt: str, magic: bytes) -> None:
    # PATH holds only this interpreter's folder: no `dot` binary can be found, and none is needed
    result = conch("graph", str(PICTURED), "--format", fmt, "--out", str(tmp_path), "--json",
                   path=str(Path(sys.executable).parent))
    assert result.returncode == 0, result.stderr
    assert "conch: warning" not in result.stderr, f"{INSTALL}\n{result.stderr}"
    picture = tmp_path / f"pictured.{fmt}"
    assert picture.is_file(), f"{INSTALL}\n{result.stderr}"
    assert picture.read_bytes().startswith(magic)
    if fmt == "svg":
        svg = picture.read_text()
        assert "<svg" in svg and "scores/z → b: FP32 [4]" in svg and "2 × KIND_GPU, 1 × KIND_CPU" in svg
    assert json.loads(result.stdout) == {"graphs": [
        {"ensemble": "pictured", "format": fmt, "rendered": True, "path": str(picture)}]}
    assert "Fontconfig" not in result.stderr


def test_without_graphviz_svg_degrades_to_dot_with_one_warning_naming_the_install(tmp_path: Path) -> None:
    result = conch("graph", str(PICTURED), "--format", "svg", "--out", str(tmp_path), "--json",
                   path=str(Path(sys.executable).parent), block_pygraphviz=True)
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.startswith("conch: warning:")]
    assert len(warnings) == 1, result.stderr
    assert result.stderr.splitlines() == [f"wrote {tmp_path / 'pictured.dot'}", warnings[0]]
    assert "rendering svg needs Graphviz: pip install 'conch[graph]'" in warnings[0]
    assert "wrote the dot text instead" in warnings[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pictured.dot"]
    assert (tmp_path / "pictured.dot").read_text().startswith('digraph "pictured" {')
    doc = json.loads(result.stdout)
    assert doc["graphs"] == [{"ensemble": "pictured", "format": "svg", "rendered": False,
                              "path": str(tmp_path / "pictured.dot")}]
    assert "pip install 'conch[graph]'" in doc["warning"]


def test_mermaid_files_and_quiet(tmp_path: Path) -> None:
    quiet = conch("graph", str(PICTURED), "--format", "mermaid", "--out", str(tmp_path), "--quiet")
    assert quiet.returncode == 0 and quiet.stdout == "" and quiet.stderr == ""
    assert (tmp_path / "pictured.mmd").read_text().splitlines()[0] == "flowchart LR"
    shown = conch("graph", str(PICTURED), "--format", "mermaid", "--json")
    assert json.loads(shown.stdout)["graphs"][0]["text"].splitlines()[0] == "flowchart LR"


def test_render_names_the_formats_it_draws(pictured: object) -> None:
    from conch.diagram import render
    from conch.errors import ConchError

    with pytest.raises(ConchError, match="cannot render 'pdf'; choose one of svg, png"):
        render(to_dot(pictured), "pdf")  # type: ignore[arg-type]


def test_the_docs_pictures_show_the_examples_as_they_are_declared() -> None:
    """docs/img holds one SVG per example, saying what `conch graph` says of it today (text compared, not
    bytes, so another Graphviz layout does not matter); when this fails, regenerate them with
    `conch graph ensembles/ --format svg --out docs/img/`."""
    import xml.etree.ElementTree as ET

    root = Path(__file__).parents[1]
    page = (root / "docs" / "commands.md").read_text()  # the pictures' page, linked from the README
    examples = discover([root / "ensembles"])
    assert sorted(p.stem for p in (root / "docs" / "img").glob("*.svg")) == sorted(e.name for e in examples)
    for ensemble in examples:
        g = ensemble.graph()
        picture = root / "docs" / "img" / f"{ensemble.name}.svg"
        assert f"]({picture.relative_to(root / 'docs').as_posix()})" in page
        texts = [t.text for t in ET.parse(picture).getroot().iter("{http://www.w3.org/2000/svg}text")]
        wanted = [g.title, *(line for node in g.nodes for line in node.lines), *(e.label for e in g.edges)]
        stale = f"{picture} is stale: conch graph ensembles/ --format svg --out docs/img/"
        assert sorted(texts) == sorted(wanted), stale
