"""What scripts and people get from each command: `--json` prints one JSON document (JSON lines for `serve`)
on stdout and nothing else there, `--quiet` prints nothing on success, progress bars appear only on a
terminal, and TensorFlow's start-up lines never reach a build's output."""

from __future__ import annotations

import json
import os
import pty
import re
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import httpx
import pytest
from test_cli import FIXTURES, PIPELINES, _lines_until, conch

ROOT = Path(__file__).parents[1]
ESCAPE = "\x1b["  # any terminal control sequence (colour, cursor) in a log is a bar drawn where none belongs


def quiet_ok(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 0, result.stderr
    assert result.stdout == "" and result.stderr == "", (result.stdout, result.stderr)


def document(result: subprocess.CompletedProcess[str]) -> dict:  # type: ignore[type-arg]
    """The one JSON document on stdout (json.loads refuses anything around it)."""
    assert result.stdout.count("\n") == 1, result.stdout
    return json.loads(result.stdout)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    assert conch("build", str(PIPELINES), "--out", str(out), "--target", "local").returncode == 0
    return out


def test_build_json_names_each_archive_and_quiet_prints_nothing(tmp_path: Path) -> None:
    built = conch("build", str(PIPELINES), "--out", str(tmp_path), "--target", "local", "--json")
    assert built.returncode == 0, built.stderr
    doc = document(built)
    assert doc["ok"] is True and doc["failed"] == [] and doc["target"] == "local" and doc["release"] == "24.10"
    (entry,) = doc["ensembles"]
    archive = tmp_path / "cli_linear.tar.gz"
    assert entry["ensemble"] == "cli_linear" and entry["archive"] == str(archive) and entry["written"] is True
    assert entry["bytes"] == archive.stat().st_size and entry["error"] is None
    assert "built" in built.stderr  # the person's lines stay on stderr
    quiet_ok(conch("build", str(PIPELINES), "--out", str(tmp_path), "--target", "local", "--quiet"))
    again = document(conch("build", str(PIPELINES), "--out", str(tmp_path), "--target", "local", "--json", "-q"))
    assert again["ensembles"][0]["written"] is False


def test_build_json_reports_a_failure_and_quiet_still_shows_it(tmp_path: Path) -> None:
    failed = conch("build", str(FIXTURES / "cli_bad"), "--out", str(tmp_path), "--json")
    assert failed.returncode == 2 and "conch: error: ensemble 'bad_unused'" in failed.stderr
    doc = document(failed)
    assert doc["ok"] is False and doc["failed"] == ["bad_unused"] and doc["ensembles"][0]["archive"] is None
    assert "input 'FORGOTTEN' is not used by any step" in doc["ensembles"][0]["error"]
    quiet = conch("build", str(FIXTURES / "cli_bad"), "--out", str(tmp_path), "--quiet")
    assert quiet.returncode == 2 and quiet.stdout == ""
    assert quiet.stderr.startswith("conch: error: ensemble 'bad_unused': input 'FORGOTTEN' is not used")


def test_check_json_and_quiet(dist: Path) -> None:
    doc = document(conch("check", str(dist), "--json"))
    assert doc["ok"] is True
    assert doc["archives"] == [{"archive": str(dist / "cli_linear.tar.gz"), "ok": True, "ensemble": "cli_linear",
                                "single": None, "models": 3, "findings": []}]
    quiet_ok(conch("check", str(dist), "--quiet"))


def test_check_quiet_shows_only_the_error_of_a_bad_archive(tmp_path: Path) -> None:
    bad = tmp_path / "bad.tar.gz"
    with tarfile.open(bad, "w:gz") as tar:
        tar.addfile(tarfile.TarInfo("m/config.pbtxt"))
    quiet = conch("check", str(bad), "--quiet")
    assert quiet.returncode == 1 and quiet.stdout == ""
    assert [line[:33] for line in quiet.stderr.splitlines()] == ["conch: error: bad.tar.gz fails `c"]
    doc = document(conch("check", str(bad), "--json"))
    assert doc["ok"] is False and doc["archives"][0]["findings"][0]["level"] == "error"


def test_run_json_has_each_step_and_verdict_and_quiet_prints_nothing() -> None:
    doc = document(conch("run", str(PIPELINES), "--json"))
    assert doc["passed"] is True
    (sample,) = doc["samples"]
    assert sample["ensemble"] == "cli_linear" and sample["sample"] == "ones" and sample["passed"] is True
    assert [s["step"] for s in sample["steps"]] == ["double", "add_one"]
    assert sample["steps"][0]["outputs"] == {"y": {"datatype": "FP32", "shape": [1, 4]}}
    assert sample["outputs"]["Z"]["passed"] is True and sample["outputs"]["Z"]["shape"] == [1, 4]
    quiet_ok(conch("run", str(PIPELINES), "--quiet"))


def test_plan_json_and_quiet(tmp_path: Path) -> None:
    args = ["plan", "--ensembles", "20", "--rps", "10", "--memory-per-model", "200MiB", "--load-seconds", "2",
            "--instance-type", "ml.m5.large", "--out", str(tmp_path)]
    doc = document(conch(*args, "--json"))
    assert doc["ensembles"] == 20 and doc["json_path"] == str(tmp_path / "plan.json")
    (row,) = doc["rows"]
    assert row["instance_type"] == "ml.m5.large" and row["instances"] >= 1
    quiet_ok(conch(*args, "--quiet"))


@pytest.mark.integration
def test_replay_json_rows_and_quiet(dist: Path) -> None:
    replayed = conch("replay", str(dist), "--endpoint", "kserve", "--json")
    assert replayed.returncode == 0, replayed.stderr
    doc = document(replayed)
    assert doc["passed"] is True and doc["passed_rows"] == 2 and doc["failed_rows"] == 0
    assert [(r["endpoint"], r["passed"]) for r in doc["rows"]] == [("load", True), ("kserve", True)]
    assert {"ensemble", "sample", "endpoint", "passed", "millis", "detail"} <= set(doc["rows"][1])
    quiet_ok(conch("replay", str(dist), "--endpoint", "kserve", "--quiet"))


@pytest.mark.integration
def test_bench_json_and_quiet(dist: Path, tmp_path: Path) -> None:
    args = ["bench", str(dist), "--triton", "--stages", '[{"duration": 2, "users": 1, "spawn_rate": 1}]',
            "--out", str(tmp_path)]
    doc = document(conch(*args, "--json"))
    assert doc["requests"] > 0 and doc["failures"] == 0 and doc["json_path"] == str(tmp_path / "bench.json")
    assert len(doc["per_stage"]) == 1
    quiet_ok(conch(*args, "--quiet"))


def _serve(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(FIXTURES)}
    return subprocess.Popen([sys.executable, "-m", "conch.cli", "serve", str(PIPELINES), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _stopped(proc: subprocess.Popen[str]) -> tuple[str, str]:
    proc.send_signal(signal.SIGTERM)
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return out, err


@pytest.mark.integration
@pytest.mark.parametrize("flags", [(), ("--json",)], ids=["plain", "json"])
def test_serve_prints_one_ready_json_line_on_stdout(flags: tuple[str, ...]) -> None:
    proc = _serve("--port", "0", *flags)
    try:
        assert proc.stdout is not None
        (line,) = _lines_until(proc.stdout, "{", timeout=120)
        ready = json.loads(line)
        assert ready["event"] == "ready" and ready["failed"] == [] and ready["endpoint_name"] == "local"
        assert httpx.get(f"{ready['url']}/ping", timeout=10).status_code == 200
    finally:
        rest, err = _stopped(proc)
    assert rest == ""  # stdout held the ready line only
    assert "Ctrl-C stops" in err


@pytest.mark.integration
def test_serve_quiet_prints_nothing() -> None:
    proc = _serve("--port", "0", "--quiet")  # the front picks its port; the OS says which (no line does)
    try:
        while True:  # ready when it answers; no line says so under --quiet
            assert proc.poll() is None, proc.communicate()
            if any(_pings(port) for port in _listening(proc.pid)):
                break
            time.sleep(0.5)
    finally:
        out, err = _stopped(proc)
    assert out == "" and err == ""


def _listening(pid: int) -> set[int]:
    """The ports a process and its descendants listen on, as the OS reports them."""
    import psutil

    pids = {pid} | {p.pid for p in psutil.Process(pid).children(recursive=True)}
    return {c.laddr.port for c in psutil.net_connections("tcp") if c.status == psutil.CONN_LISTEN and c.pid in pids}


def _pings(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/ping", timeout=30).status_code == 200
    except httpx.HTTPError:
        return False


def without_escapes(text: str) -> str:
    """What a terminal shows of ``text``, less its redraws: the control sequences removed."""
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)


def _on_a_terminal(*args: str) -> tuple[int, str, str]:
    """`conch ARGS` with stderr on a pseudo-terminal (as in a person's shell) and stdout on a pipe."""
    master, slave = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(FIXTURES), "COLUMNS": "120"}
    proc = subprocess.Popen([sys.executable, "-m", "conch.cli", *args], stdout=subprocess.PIPE, stderr=slave,
                            env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # the terminal's other side closed: conch exited
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert proc.stdout is not None
    out = proc.stdout.read().decode()
    return proc.wait(timeout=60), out, b"".join(chunks).decode(errors="replace")


def test_progress_bars_on_a_terminal_only(tmp_path: Path) -> None:
    code, out, err = _on_a_terminal("build", str(PIPELINES), "--out", str(tmp_path / "tty"), "--target", "local")
    assert code == 0 and out == ""
    plain = without_escapes(err)
    assert ESCAPE in err and re.search(r"building ━+ 1/1", plain), err  # the bar, drawn and finished
    assert "[1/1] built" in err  # the ordinary line as well, above the bar
    piped = conch("build", str(PIPELINES), "--out", str(tmp_path / "pipe"), "--target", "local")
    assert piped.returncode == 0 and ESCAPE not in piped.stderr and "━" not in piped.stderr
    assert piped.stderr.startswith("[1/1] built")
    code, out, err = _on_a_terminal("build", str(PIPELINES), "--out", str(tmp_path / "q"), "--target", "local", "-q")
    assert code == 0 and out == "" and err == ""  # --quiet: no bar either


TF_CHATTER = re.compile(r"absl::InitializeLog|oneDNN|cpu_feature_guard|tensorflow/|TF-TRT|MLIR|^[IWE]\d{4} ",
                        re.MULTILINE)


def test_a_build_with_a_tensorflow_step_prints_no_tensorflow_lines(tmp_path: Path) -> None:
    # A fresh cache: TensorFlow really runs (graph built and frozen, expected outputs computed), here and in a
    # worker process (-j 2 over two files).
    env = {**os.environ, "PYTHONPATH": str(FIXTURES), "CONCH_CACHE_DIR": str(tmp_path / "cache")}
    for name in ("TF_CPP_MIN_LOG_LEVEL", "TF_ENABLE_ONEDNN_OPTS"):
        env.pop(name, None)
    classifier = ROOT / "ensembles" / "image_classifier.py"
    result = subprocess.run([sys.executable, "-m", "conch.cli", "build", str(classifier), str(PIPELINES),
                             "--out", str(tmp_path / "dist"), "-j", "2"],
                            capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stderr
    assert not TF_CHATTER.search(result.stdout + result.stderr), result.stdout + result.stderr
    with tarfile.open(tmp_path / "dist" / "image_classifier.tar.gz") as tar:
        assert "image_classifier__inception_graphdef/1/model.graphdef" in tar.getnames()
    assert sorted(line.split(" ")[1] for line in result.stderr.splitlines()) == ["built", "built"]


@pytest.mark.integration
def test_replay_draws_its_bar_on_a_terminal(dist: Path) -> None:
    code, out, err = _on_a_terminal("replay", str(dist), "--endpoint", "kserve")
    assert code == 0 and "2 passed, 0 failed" in out
    plain = without_escapes(err)
    assert re.search(r"replaying ━+ 1/1", plain), err
    assert "loading cli_linear.tar.gz" in plain  # the ordinary lines too


def _into_one_file(path: Path, *args: str) -> int:
    """`conch ARGS > path 2>&1`, as a CI job's log holds both streams."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(FIXTURES), os.environ.get("PYTHONPATH", "")])}
    with path.open("wb") as log:
        return subprocess.run([sys.executable, "-m", "conch.cli", *args], stdout=log, stderr=subprocess.STDOUT,
                              env=env, timeout=300).returncode


def _all_on_a_terminal(*args: str) -> tuple[int, str]:
    """`conch ARGS` with stdout and stderr on one pseudo-terminal, as in a person's shell."""
    master, slave = pty.openpty()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(FIXTURES), os.environ.get("PYTHONPATH", "")]),
           "COLUMNS": "200"}
    proc = subprocess.Popen([sys.executable, "-m", "conch.cli", *args], stdout=slave, stderr=slave, env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # the terminal's other side closed: conch exited
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    return proc.wait(timeout=60), without_escapes(b"".join(chunks).decode(errors="replace"))


@pytest.mark.integration
def test_replay_into_a_file_prints_each_row_once(dist: Path, tmp_path: Path) -> None:
    log = tmp_path / "replay.log"
    assert _into_one_file(log, "replay", str(dist), "--endpoint", "kserve") == 0
    text = log.read_text()
    assert text.count(" ones ") == 1, text  # the table's row, no live line before it
    assert "loading cli_linear.tar.gz" in text and "2 passed, 0 failed" in text
    code, shown = _all_on_a_terminal("replay", str(dist), "--endpoint", "kserve")
    assert code == 0
    assert "cli_linear.tar.gz ones kserve: ok" in shown, shown  # the live line, on a terminal only
    assert shown.count(" ones ") == 2, shown
