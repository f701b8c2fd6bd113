"""`conch build --shard K/N` on the command line: N processes given the same sources in any order build
every ensemble exactly once between them; a bad K/N is one error line before anything is imported."""

from __future__ import annotations

from pathlib import Path

from test_cli import conch
from test_cli_errors import assert_one_line_each

from conch.builder.discover import shard_of

DECLARE = '''from basic_steps import double

from conch import Ensemble, PythonStep, Tensor

for _name in {names!r}:
    globals()[_name] = Ensemble(_name, max_batch_size=4)
    _step = PythonStep("double", double, inputs=[Tensor("x", "FP32", [4])],
                       outputs=[Tensor("y", "FP32", [4])], max_batch_size=4)
    globals()[_name].output("Y", _step(globals()[_name].input("X", "FP32", [4])))
'''


def test_shards_build_every_ensemble_once_whatever_the_order_of_the_paths(tmp_path: Path) -> None:
    names = {"first": [f"shard_a{i}" for i in range(4)], "second": [f"shard_b{i}" for i in range(4)]}
    src = tmp_path / "src"
    src.mkdir()
    for file, declared in names.items():
        (src / f"shard_{file}.py").write_text(DECLARE.format(names=declared))
    every = sorted(n for declared in names.values() for n in declared)
    first, second = src / "shard_first.py", src / "shard_second.py"
    orders = [[src], [second, first], [first, second]]
    built: list[str] = []
    for k, paths in enumerate(orders, start=1):
        out = tmp_path / f"dist{k}"
        result = conch("build", *map(str, paths), "--shard", f"{k}/3", "--target", "local", "-j", "1",
                       "--out", str(out))
        assert result.returncode == 0, result.stderr
        mine = sorted(p.name.removesuffix(".tar.gz") for p in out.glob("*.tar.gz")) if out.exists() else []
        assert mine == [n for n in every if shard_of(n, 3) == k]
        assert f"shard {k}/3: {len(mine)} of the 8 ensembles found" in result.stderr
        built += mine
    assert sorted(built) == every  # each once: `conch check` over the union sees them all


def test_a_bad_shard_is_one_error_line(tmp_path: Path) -> None:
    result = conch("build", str(tmp_path / "nothing_imported.py"), "--shard", "4/3")
    assert result.returncode == 2
    assert_one_line_each(result.stderr, ["--shard '4/3': expected K/N with 1 <= K <= N (e.g. --shard 1/4"])
