"""Every user mistake or bad file the CLI meets is one `conch: error:` line and exit code 2, never a
traceback; a command over several ensembles or archives reports each failure and carries on with the rest."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from pathlib import Path

import pytest
from hostile_archives import write_archive
from seed_archives import bert_repo, pack_repo
from test_cli import conch

GOOD = '''
import numpy as np
from basic_steps import double
from conch import Ensemble, PythonStep, Tensor

good = Ensemble("{name}", max_batch_size=4)
step = PythonStep("double", double, inputs=[Tensor("x", "FP32", [4])],
                  outputs=[Tensor("y", "FP32", [4])], max_batch_size=4)
good.output("Y", step(good.input("X", "FP32", [4])))
good.sample("ones", {{"X": np.ones((1, 4), np.float32)}}, {{"Y": np.full((1, 4), 2, np.float32)}})
'''

# Each file holds one mistake that used to end in a traceback; the line that must name it.
BAD_FILES = {
    "nul_name.py": ('from conch import Ensemble\nbad = Ensemble("bad\\x00name")\n',
                    r"nul_name.py: ensemble: name 'bad\x00name' is not a safe folder name"),
    "long_name.py": ('from conch import Ensemble\nbad = Ensemble("x" * 250)\n',
                     "is 250 characters; keep model names to 128"),
    "unicode_name.py": ('from conch import Ensemble\nbad = Ensemble("modèle")\n',
                        r"ensemble: name 'mod\xe8le' is not a safe folder name"),
    "missing_labels.py": ('from conch import Tensor\nt = Tensor("y", "FP32", [3], labels="no/such/labels.txt")\n',
                          "tensor 'y': label file no/such/labels.txt does not exist"),
    "mistyped_setting.py": ('from conch import InstanceGroup\ng = InstanceGroup("KIND_CPU", count="2")\n',
                            "instance_group count must be a whole number, got '2'"),
    "float_dims.py": ('from conch import Tensor\nt = Tensor("x", "FP32", [1.5])\n',
                      "tensor 'x': dims [1.5]: each size must be a whole number, got 1.5"),
    "user_bug.py": ("import numpy\nvalue = numpy.undefined_thing\n",
                    "user_bug.py line 2: AttributeError: module 'numpy' has no attribute 'undefined_thing'"),
    "missing_file.py": (GOOD.format(name="crash").replace(
        "max_batch_size=4)\ngood.output", "max_batch_size=4, files={'x.txt': '/no/such/file'})\ngood.output"),
        "ensemble 'crash'"),
}


def assert_one_line_each(stderr: str, needles: list[str]) -> None:
    assert "Traceback" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("conch: error:")]
    for needle in needles:
        assert sum(needle in line for line in errors) == 1, (needle, errors)


def test_build_reports_each_broken_file_and_builds_the_rest(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a_good.py").write_text(GOOD.format(name="first_good"))
    (src / "z_good.py").write_text(GOOD.format(name="last_good"))
    for name, (text, _) in BAD_FILES.items():
        (src / name).write_text(text)
    result = conch("build", str(src), "--out", str(tmp_path / "dist"))
    assert result.returncode == 2
    assert_one_line_each(result.stderr, [needle for _, needle in BAD_FILES.values()])
    assert sorted(p.name for p in (tmp_path / "dist").iterdir()) == ["first_good.tar.gz", "last_good.tar.gz"]


def test_build_of_a_path_that_does_not_exist(tmp_path: Path) -> None:
    result = conch("build", str(tmp_path / "nope.py"), "--out", str(tmp_path))
    assert result.returncode == 2
    assert_one_line_each(result.stderr, ["nope.py: no such file or folder"])


def bad_archives(folder: Path, good: Path) -> dict[str, str]:
    """Broken archives beside a good one; each with the text its error line must hold."""
    data = good.read_bytes()
    (folder / "truncated.tar.gz").write_bytes(data[: len(data) // 2])
    (folder / "not_gzip.tar.gz").write_text("hello\n" * 100)
    pack_repo(bert_repo(), folder / "no_manifest.tar.gz")
    broken = io.BytesIO()
    with tarfile.open(fileobj=broken, mode="w") as tar, tarfile.open(good) as src:
        for member in src:
            payload = src.extractfile(member) if member.isfile() else None
            if member.name == "conch-manifest.json":
                member.size = 5
                payload = io.BytesIO(b"{oops")
            tar.addfile(member, payload)
    (folder / "broken_manifest.tar.gz").write_bytes(gzip.compress(broken.getvalue()))
    return {
        "truncated.tar.gz": "truncated.tar.gz is not a readable .tar.gz",
        "not_gzip.tar.gz": "not_gzip.tar.gz is not a readable .tar.gz",
        "no_manifest.tar.gz": "no_manifest.tar.gz has no conch-manifest.json",
        "broken_manifest.tar.gz": "conch-manifest.json is not",
    }


def test_inspect_of_each_bad_archive_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "src.py").write_text(GOOD.format(name="good"))
    assert conch("build", str(tmp_path / "src.py"), "--out", str(tmp_path), "--target", "local").returncode == 0
    bad = bad_archives(tmp_path, tmp_path / "good.tar.gz")
    bad["missing.tar.gz"] = "missing.tar.gz: no such archive"
    for name, needle in bad.items():
        result = conch("inspect", str(tmp_path / name))
        assert result.returncode == 2, (name, result.stderr)
        assert_one_line_each(result.stderr, [needle])
    odd = tmp_path / "odd.tar.gz"
    write_archive(odd, [("conch-manifest.json", "file", json.dumps({"ensemble": "x"}))])
    result = conch("inspect", str(odd))
    assert result.returncode == 2
    assert_one_line_each(result.stderr, ["its manifest lacks 'target'"])


def test_check_reports_each_archive_and_exits_non_zero(tmp_path: Path) -> None:
    good = pack_repo(bert_repo(), tmp_path / "seed.tar.gz")
    write_archive(tmp_path / "evil.tar.gz", [("m/1/model.py", "symlink", "/etc/passwd")])
    result = conch("check", str(tmp_path))
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert f"{good.name}: ok: ensemble 'ensemble', 4 model folders" in result.stdout
    assert "evil.tar.gz: error: archive" in result.stdout and "is a symlink to the absolute path" in result.stdout


@pytest.mark.integration
def test_replay_reports_each_bad_archive_and_replays_the_good_ones(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.py").write_text(GOOD.format(name="good_a"))
    (src / "z.py").write_text(GOOD.format(name="good_z"))
    dist = tmp_path / "dist"
    assert conch("build", str(src), "--out", str(dist), "--target", "local").returncode == 0
    bad = bad_archives(dist, dist / "good_a.tar.gz")
    result = conch("replay", str(dist), str(tmp_path / "missing.tar.gz"), "--endpoint", "kserve")
    assert result.returncode == 2
    assert_one_line_each(result.stderr, [*bad.values(), "missing.tar.gz"])
    assert "4 passed, 5 failed" in result.stdout  # each good archive: its load and its sample
    for name in ("good_a.tar.gz", "good_z.tar.gz"):
        assert any(name in line and "kserve" in line and " ok " in line for line in result.stdout.splitlines())
