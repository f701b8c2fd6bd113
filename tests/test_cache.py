"""conch.cache's keys: the code digest a pure function (a sample's expected outputs, a DALI pipeline declared
``pure=True``) is keyed by, so an edit of that code is never answered from the cache; the installed
distributions; and the stat of a file, which tells nothing while the file changed in the last seconds."""

from __future__ import annotations

import importlib
import os
import sys
import time
from pathlib import Path

import pytest

from conch.cache import RACY_NS, code_digest, drop_racy_bytecode, environment, pure_key, stat_identity


def _module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> object:
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    return importlib.import_module(name)


def test_a_package_beside_the_file_is_part_of_the_digest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``from helpers_pkg.scale import K``: every file of the sibling package counts, not only ``x.py`` siblings."""
    (tmp_path / "helpers_pkg").mkdir()
    (tmp_path / "helpers_pkg" / "__init__.py").write_text("")
    (tmp_path / "helpers_pkg" / "scale.py").write_text("K = 2\n")
    (tmp_path / "uses_pkg.py").write_text("def expected():\n    from helpers_pkg.scale import K\n    return {'K': K}\n")
    fn = _module(tmp_path, monkeypatch, "uses_pkg").expected  # type: ignore[attr-defined]
    before = code_digest(fn)
    assert before is not None
    (tmp_path / "helpers_pkg" / "scale.py").write_text("K = 3.0\n")
    assert code_digest(fn) != before


def test_a_relative_import_inside_a_package_is_followed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pipeline in ``pkg/pipes.py`` doing ``from .ops import resize`` is keyed by ``pkg/ops.py`` too."""
    pkg = tmp_path / "rel_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "ops.py").write_text("SIZE = 224\n")
    (pkg / "pipes.py").write_text("from .ops import SIZE\n\ndef expected():\n    return {'S': SIZE}\n")
    fn = _module(tmp_path, monkeypatch, "rel_pkg.pipes").expected  # type: ignore[attr-defined]
    before = code_digest(fn)
    (pkg / "ops.py").write_text("SIZE = 256\n")
    assert code_digest(fn) != before
    (tmp_path / "unrelated_sibling.py").write_text("x = 1\n")  # a file nothing imports changes nothing
    (pkg / "ops.py").write_text("SIZE = 224\n")
    assert code_digest(fn) == before


def test_a_closure_value_is_part_of_the_digest_and_an_object_leaves_none(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "closing.py").write_text("def make(k):\n    def expected():\n        return {'K': k}\n"
                                         "    return expected\n")
    module = _module(tmp_path, monkeypatch, "closing")
    two, three = code_digest(module.make(2)), code_digest(module.make(3))  # type: ignore[attr-defined]
    assert two is not None and three is not None and two != three
    assert code_digest(module.make(object())) is None  # type: ignore[attr-defined]


def test_pure_key_follows_the_installed_distributions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A distribution installed or upgraded where the process imports from changes the key of a pure function."""
    (tmp_path / "pure_fn.py").write_text("def expected():\n    return {}\n")
    fn = _module(tmp_path, monkeypatch, "pure_fn").expected  # type: ignore[attr-defined]
    before = pure_key(fn)
    (tmp_path / "somelib-1.0.dist-info").mkdir()
    at_one = pure_key(fn)
    (tmp_path / "somelib-1.0.dist-info").rename(tmp_path / "somelib-2.0.dist-info")
    at_two = pure_key(fn)
    assert len({repr(before), repr(at_one), repr(at_two)}) == 3
    assert environment()[0] == sys.version


def test_a_file_changed_in_the_last_seconds_has_no_stat_identity(tmp_path: Path) -> None:
    """git's racily clean rule: a write within the file system's clock tick would keep size and mtime."""
    path = tmp_path / "weights.bin"
    path.write_bytes(b"1234")
    assert stat_identity(path) is None
    old = time.time_ns() - 10 * RACY_NS
    os.utime(path, ns=(old, old))  # the ctime is now: still too recent
    assert stat_identity(path) is None


def test_pure_must_be_true_or_false_on_a_sample_and_a_python_step() -> None:
    import basic_steps
    import numpy as np

    from conch import DeclarationError, Ensemble, PythonStep, Tensor

    with pytest.raises(DeclarationError, match="python step 'double': pure must be True or False, got 1"):
        PythonStep("double", basic_steps.double, inputs=[Tensor("x", "FP32", [4])], outputs=[Tensor("y", "FP32", [4])],
                   pure=1)  # type: ignore[arg-type]
    ens = Ensemble("pure", max_batch_size=2)
    step = PythonStep("double", basic_steps.double, inputs=[Tensor("x", "FP32", [4])],
                      outputs=[Tensor("y", "FP32", [4])],
                      max_batch_size=2)
    ens.output("Y", step(ens.input("X", "FP32", [4])))
    with pytest.raises(DeclarationError, match="ensemble 'pure' sample 'one': pure must be True or False, got 'no'"):
        ens.sample("one", {"X": np.ones((1, 4), np.float32)}, lambda: {}, pure="no")  # type: ignore[arg-type]


def test_a_function_its_file_no_longer_holds_has_no_digest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A notebook imported the step module, then the file was edited and not reloaded: the function runs its old
    code, so a key over the file's new bytes would file the old code's answer under the new code's name."""
    (tmp_path / "kernel_steps.py").write_text("def expected():\n    return {'Y': 2}\n")
    module = _module(tmp_path, monkeypatch, "kernel_steps")
    fresh = code_digest(module.expected)  # type: ignore[attr-defined]
    assert fresh is not None
    (tmp_path / "kernel_steps.py").write_text("def expected():\n    return {'Y': 3}\n")
    assert code_digest(module.expected) is None and pure_key(module.expected) is None  # type: ignore[attr-defined]
    drop_racy_bytecode([tmp_path / "kernel_steps.py"])  # the edit may fall within the second of the first import
    reloaded = importlib.reload(module)  # type: ignore[arg-type]
    assert code_digest(reloaded.expected) not in (None, fresh)


def test_a_callable_class_is_keyed_by_its_methods_and_an_instance_by_its_attributes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Python step's code may be a class (set up once, then called) or an instance of one."""
    (tmp_path / "callable_steps.py").write_text(
        "class Scale:\n    def __init__(self, k=2):\n        self.k = k\n\n"
        "    def __call__(self, x):\n        return {'y': x * self.k}\n")
    module = _module(tmp_path, monkeypatch, "callable_steps")
    of_class = code_digest(module.Scale)  # type: ignore[attr-defined]
    two, three = code_digest(module.Scale(2)), code_digest(module.Scale(3))  # type: ignore[attr-defined]
    assert None not in (of_class, two, three) and len({of_class, two, three}) == 3
    assert code_digest(module.Scale(object())) is None  # type: ignore[attr-defined]
    bound_two, bound_three = code_digest(module.Scale(2).__call__), code_digest(module.Scale(3).__call__)  # type: ignore[attr-defined]
    assert None not in (bound_two, bound_three) and bound_two != bound_three  # a bound method: its instance's too
    (tmp_path / "callable_steps.py").write_text(
        "class Scale:\n    def __init__(self, k=2):\n        self.k = k\n\n"
        "    def __call__(self, x):\n        return {'y': x * self.k + 1}\n")
    assert code_digest(module.Scale) is None  # the class runs the code its file no longer holds


def test_pure_replaces_cache_which_stays_one_release_with_a_warning() -> None:
    import basic_steps
    import dali_pipelines
    import numpy as np

    from conch import DaliStep, DeclarationError, Ensemble, PythonStep, Tensor

    io = {"inputs": [Tensor("x", "FP32", [4])], "outputs": [Tensor("y", "FP32", [4])]}
    assert PythonStep("new", basic_steps.double, **io, pure=True).pure
    with pytest.warns(DeprecationWarning, match=r"^PythonStep\(cache=\.\.\.\) is deprecated: it says the code is "
                                                r"pure, so write PythonStep\(\.\.\., pure=True\); cache= goes in the "
                                                r"next release$"):
        assert PythonStep("old", basic_steps.double, **io, cache=True).pure
    dali_io = {"inputs": [Tensor("DALI_INPUT_0", "FP32", [4])], "outputs": [Tensor("DALI_OUTPUT_0", "FP32", [4])]}
    with pytest.warns(DeprecationWarning, match=r"^DaliStep\(cache=\.\.\.\) is deprecated"):
        assert DaliStep("old", dali_pipelines.affine, **dali_io, max_batch_size=4, cache=True).pure
    ens = Ensemble("pure_samples", max_batch_size=2)
    ens.output("Y", PythonStep("double", basic_steps.double, **io, max_batch_size=2)(ens.input("X", "FP32", [4])))
    with pytest.warns(DeprecationWarning, match=r"^Ensemble\.sample\(cache=\.\.\.\) is deprecated: it says the code "
                                                r"is pure, so write Ensemble\.sample\(\.\.\., pure=True\)"):
        ens.sample("old", {"X": np.ones((1, 4), np.float32)}, lambda: {}, cache=True)
    assert ens.samples[0].pure
    with pytest.raises(DeclarationError, match=r"^python step 'both': pure=True and cache=False disagree; give pure= "
                                               r"alone$"), pytest.warns(DeprecationWarning):
        PythonStep("both", basic_steps.double, **io, pure=True, cache=False)


def test_a_build_says_once_naming_each_step_whose_pure_code_it_cannot_key() -> None:
    """A default holding an array, a decorated ``__call__``, a closure over an array: each runs at every build,
    and the build says so once, naming the step or the sample."""
    import basic_steps
    import numpy as np
    import unkeyed_steps

    from conch import Ensemble, PythonStep, Tensor
    from conch.builder.repository_build import render_repository

    io = {"inputs": [Tensor("x", "FP32", [4])], "outputs": [Tensor("y", "FP32", [4])], "max_batch_size": 4}
    ens = Ensemble("unkeyed", max_batch_size=4)
    x = ens.input("X", "FP32", [4])
    scaled = PythonStep("scaled", unkeyed_steps.scaled, **io, pure=True)(x)
    doubled = PythonStep("doubled", unkeyed_steps.Doubler, **io, pure=True)(scaled)
    ens.output("Y", PythonStep("told", basic_steps.double, **io, pure=True)(doubled))
    factor = np.full(4, 8, np.float32)
    ens.sample("ones", {"X": np.ones((1, 4), np.float32)}, lambda: {"Y": np.ones((1, 4), np.float32) * factor},
               pure=True)
    said: list[str] = []
    notes = [n for n in render_repository(ens, "local", "24.10", progress=said.append).notes if "pure=True" in n]
    assert notes == [
        "ensemble 'unkeyed' step 'scaled': declared pure=True, but conch cannot key its code by content: its "
        "closures, defaults, partial arguments or instance attributes hold a value whose repr is not its content "
        "(an array, an object): pass such data as a file of the step, or compute it in the code; it runs at every "
        "build",
        "ensemble 'unkeyed' step 'doubled': declared pure=True, but conch cannot key its code by content: its "
        "method __call__ is wrapped by a decorator whose code conch cannot read: declare the plain method, or the "
        "decorator with functools.wraps; it runs at every build",
        "ensemble 'unkeyed' sample 'ones': declared pure=True, but conch cannot key its code by content: its "
        "closures, defaults, partial arguments or instance attributes hold a value whose repr is not its content "
        "(an array, an object): pass such data as a file of the step, or compute it in the code; it runs at every "
        "build"]
    assert [line for line in said if "pure=True" in line] == [f"warning: {n}" for n in notes]


def test_an_editable_install_is_keyed_by_its_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """pip install -e keeps the dist-info's name and version while the code is edited: its files are keyed."""
    from conch.cache import editable_sources

    site, src = tmp_path / "site", tmp_path / "src"
    info = site / "edited_pkg-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "direct_url.json").write_text(f'{{"dir_info": {{"editable": true}}, "url": "file://{src}"}}')
    (info / "top_level.txt").write_text("edited_pkg\n")
    (src / "edited_pkg").mkdir(parents=True)
    module = src / "edited_pkg" / "__init__.py"
    module.write_text("SCALE = 2\n")
    monkeypatch.syspath_prepend(str(src))
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    (before,) = [e for e in editable_sources() if e[0] == info.name]  # type: ignore[index]
    module.write_text("SCALE = 3\n")
    (after,) = [e for e in editable_sources() if e[0] == info.name]  # type: ignore[index]
    assert before != after
    assert environment() == environment()  # the dist-info names alone did not change
