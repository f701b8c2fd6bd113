"""Shared fixtures: small declared ensembles, one real tritonserver and one moto server per test session.

The session uses a cache folder of its own (``$CONCH_CACHE_DIR``), set here before anything imports
conch's cache and inherited by the CLI subprocesses; it is never the user's ``~/.cache/conch``. Set
``CONCH_TEST_CACHE_DIR`` to keep one folder warm across sessions (exported models, packed envs)."""

from __future__ import annotations

import operator
import os
import re
import shutil
import socket
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _pytest import raises as _raises
from _pytest.assertion import util as _assert_util

_SESSION_CACHE = "_CONCH_TEST_SESSION_CACHE"  # set once per session: this file is executed twice (see sagemaker/)
if os.environ.get(_SESSION_CACHE) is None or os.environ.get(_SESSION_CACHE) != os.environ.get("CONCH_CACHE_DIR"):
    _kept = os.environ.get("CONCH_TEST_CACHE_DIR")
    os.environ["CONCH_CACHE_DIR"] = _kept or tempfile.mkdtemp(prefix="conch-test-cache-")
    os.environ[_SESSION_CACHE] = os.environ["CONCH_CACHE_DIR"]
    # the image's Python environments (pip, ~20 s each): built once for the session, whatever cache a test uses
    os.environ["CONCH_IMAGE_PYTHON_DIR"] = os.path.join(os.environ["CONCH_CACHE_DIR"], "image-python")

# Python as users run it: bytecode caches written and reused. Under PYTHONDONTWRITEBYTECODE=1 (set in some CI
# images) every worker and CLI subprocess compiled TensorFlow, torch and transformers from source again, about 10 s
# of CPU per TensorFlow import; the install is `--no-compile`, so the first import writes each cache (docs/testing.md).
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

FIXTURES = Path(__file__).parent / "fixtures"
if str(FIXTURES) not in sys.path:
    sys.path.insert(0, str(FIXTURES))

import basic_steps  # noqa: E402
import error_raises  # noqa: E402

from conch import Ensemble, PythonStep, Tensor  # noqa: E402

_HELD_SOCKETS: list[socket.socket] = []


def _refusing_port() -> int:
    """A loopback port that refuses every connection for the whole session: bound here and never listened on,
    so no other process can take it (unlike a port number assumed closed, such as 9)."""
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    _HELD_SOCKETS.append(held)
    return int(held.getsockname()[1])


REFUSED_URL = f"http://127.0.0.1:{_refusing_port()}"  # connecting there fails at once: nothing listens


def pytest_unconfigure(config: pytest.Config) -> None:
    # Under pytest-xdist the workers inherit this process's environment, so they share its cache folder (conch's
    # cache publishes atomically, for parallel builds): the controller, which ends last, removes it.
    if not os.environ.get("CONCH_TEST_CACHE_DIR") and not hasattr(config, "workerinput"):
        shutil.rmtree(os.environ[_SESSION_CACHE], ignore_errors=True)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: two workers more than the cores this process may run on, at most four (each worker starts its
    own tritonserver, moto server and package index when its tests need them). The run waits on servers, loads
    and timeouts a test provokes: on 2 cores, the default run took 14 min 34 s on three workers and 13 min 2 s on
    four (docs/testing.md)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return min(cores + 2, 4)


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    """After coverage's report: every user-facing refusal in conch/ and whether a test asserted its message."""
    error_raises.terminal_summary(terminalreporter, config)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini("raise_floor", "asserted share (%) of user-facing refusals below which a whole-suite run fails "
                  "(tests/error_raises.py)", default="")


def pytest_sessionstart(session: pytest.Session) -> None:
    error_raises.read_ahead(session.config)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    error_raises.session_finish(session)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """pytest-xdist's controller: a worker ended; keep the refusals its tests asserted for the gate."""
    error_raises.worker_done(node.config, getattr(node, "workeroutput", {}))


# The evidence for tests/error_raises.py: which messages the tests asserted on, test by test.
@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    error_raises.EVIDENCE.test = item.nodeid
    return (yield)


# What a comparison of plain values that holds is checked by again, cheaply, to hand it to the evidence alone.
_HOLDS: dict[str, Callable[[Any, Any], bool]] = {"==": operator.eq, "in": lambda left, right: left in right}
_PLAIN = frozenset({str, bytes, int, float, bool, type(None), dict, list, tuple, set, frozenset})


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """With the pass hook on, pytest explains every comparison that holds as it would one that failed (a whole
    text or pprint diff of two equal values, 0.1 s for a 10 kB JSON text) and nobody reads it. A comparison of
    plain values that holds goes to the evidence only; any other, and every one that fails, is explained."""
    explain = _assert_util._reprcompare
    if explain is not None:
        def explain_failures(op: str, left: object, right: object) -> str | None:
            holds = _HOLDS.get(op)
            if holds is not None and type(left) in _PLAIN and type(right) in _PLAIN:
                try:
                    held = bool(holds(left, right))
                except Exception:  # e.g. containers of numpy arrays: let pytest say what it says
                    held = False
                if held:
                    error_raises.EVIDENCE.compared(op, left, right)
                    return None
            return explain(op, left, right)

        _assert_util._reprcompare = explain_failures
    try:
        return (yield)
    finally:
        _assert_util._reprcompare = explain


def pytest_assertion_pass(item: pytest.Item, lineno: int, orig: str, expl: str) -> None:
    """Present so that pytest hands passing comparisons to pytest_assertrepr_compare (the ini enables it)."""


def pytest_assertrepr_compare(config: pytest.Config, op: str, left: object, right: object) -> None:
    error_raises.EVIDENCE.compared(op, left, right)


def _record_match(original: Callable[..., bool]) -> Callable[..., bool]:
    def check_match(self: Any, exc: BaseException) -> bool:
        matched = original(self, exc)
        if matched and self.match is not None:
            pattern = self.match.pattern if isinstance(self.match, re.Pattern) else str(self.match)
            error_raises.EVIDENCE.asserted(pattern, str(exc), regex=True)
        return matched
    return check_match


def _record_excinfo_match(original: Callable[..., bool]) -> Callable[..., bool]:
    def match(self: pytest.ExceptionInfo[BaseException], regexp: str | re.Pattern[str]) -> bool:
        result = original(self, regexp)
        pattern = regexp.pattern if isinstance(regexp, re.Pattern) else regexp
        error_raises.EVIDENCE.asserted(pattern, str(self.value), regex=True)
        return result
    return match


if not hasattr(_raises.AbstractRaises, "_conch_records"):  # this file runs twice (see sagemaker/conftest.py)
    _raises.AbstractRaises._conch_records = True  # type: ignore[attr-defined]
    _raises.AbstractRaises._check_match = _record_match(_raises.AbstractRaises._check_match)  # type: ignore[method-assign]
    pytest.ExceptionInfo.match = _record_excinfo_match(pytest.ExceptionInfo.match)  # type: ignore[method-assign]


def _forget_asserts_rewritten_without_the_pass_hook() -> None:
    """pytest keeps rewritten test modules in __pycache__ and reuses them whatever the ini says: modules
    rewritten before enable_assertion_pass_hook was set would never report a passing assert. Once per checkout,
    drop them so they are rewritten with the hook."""
    here = Path(__file__).parent
    mark = here / "__pycache__" / "assertion-pass-hook.mark"
    if mark.exists():
        return
    for pyc in here.rglob("__pycache__/*-pytest-*.pyc"):
        pyc.unlink(missing_ok=True)
    mark.parent.mkdir(exist_ok=True)
    mark.touch()


_forget_asserts_rewritten_without_the_pass_hook()


def linear_ensemble(name: str = "linear", max_batch_size: int = 8) -> Ensemble:
    """X -> double -> add_one -> Z, with one sample."""
    ens = Ensemble(name, max_batch_size=max_batch_size)
    x = ens.input("X", "FP32", [4])
    dbl = PythonStep("double", basic_steps.double, inputs=[Tensor("x", "FP32", [4])],
                     outputs=[Tensor("y", "FP32", [4])],
                     max_batch_size=max_batch_size)
    add = PythonStep("add_one", basic_steps.add_one, inputs=[Tensor("y", "FP32", [4])],
                     outputs=[Tensor("z", "FP32", [4])],
                     max_batch_size=max_batch_size)
    ens.output("Z", add(dbl(x)))
    data = np.arange(8, dtype=np.float32).reshape(2, 4)
    ens.sample("two rows", {"X": data}, {"Z": data * 2 + 1})
    return ens


def half_ensemble(name: str = "halves") -> Ensemble:
    """X (FP16) -> twice -> Y (FP16), with one sample: tensors Triton's JSON bodies cannot carry."""
    ens = Ensemble(name, max_batch_size=4)
    step = PythonStep("twice", basic_steps.twice_half, inputs=[Tensor("x", "FP16", [4])],
                      outputs=[Tensor("y", "FP16", [4])],
                      max_batch_size=4)
    ens.output("Y", step(ens.input("X", "FP16", [4])))
    x = np.ones((2, 4), np.float16)
    ens.sample("ones", {"X": x}, {"Y": x * 2})
    return ens


@pytest.fixture
def linear() -> Ensemble:
    return linear_ensemble()


@pytest.fixture(scope="session")
def triton() -> Iterator[object]:
    """One real tritonserver (SageMaker MME front end + KServe HTTP) for the integration tests. If it dies, the
    test that was running fails naming how (signal, log) and it is restarted for the tests after it
    (``pytest_runtest_makereport`` below)."""
    from conch.triton.server import LocalTriton

    server = LocalTriton()
    server.start()
    _SESSION_SERVERS.append(server)
    try:
        yield server
    finally:
        _SESSION_SERVERS.remove(server)
        server.stop()


_SESSION_SERVERS: list[Any] = []  # the session's `triton`, once started


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A test that had the session's tritonserver (``triton``) and left it dead fails with its death (how it
    exited, its log's last lines and where the log is kept), whatever the test itself said; the server is
    started again for the tests after it, so one death fails one test, not every test after it on this worker."""
    report: Any = yield
    if "triton" not in getattr(item, "fixturenames", ()) or not _SESSION_SERVERS:
        return report  # type: ignore[no-any-return]
    server = _SESSION_SERVERS[0]
    death = server.lost(f"{item.nodeid} ran ({call.when})")
    if death is None:
        return report  # type: ignore[no-any-return]
    own = f"\n\nthe test's own outcome: {report.longreprtext}" if report.failed else ""
    report.outcome, report.longrepr = "failed", f"the session's {death}{own}"
    try:
        server.restart()
    except Exception as exc:  # the tests after it fail with the same death
        report.longrepr += f"\n\nand it did not start again: {exc}"
    return report  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def triton_alone() -> Iterator[object]:
    """A tritonserver for one module's tests alone: a test that loads and unloads in a loop (the property tests)
    does not share its server's churn, or its death, with the other tests of its worker."""
    from conch.triton.server import LocalTriton

    with LocalTriton() as server:
        yield server


@pytest.fixture(scope="session")
def moto_server() -> Iterator[str]:
    """moto's S3/SageMaker-compatible server on a free port of 127.0.0.1 for the whole session."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture(scope="session")
def package_index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A package index of packages made on the spot (tests/fixtures/package_index.py), on 127.0.0.1."""
    import package_index as index

    with index.serving(index.write_index(tmp_path_factory.mktemp("index"))) as url:
        yield url


@pytest.fixture
def local_index(package_index: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """pip, in this test and the processes it starts, asks the tests' own index and nothing else."""
    for name, value in {"PIP_INDEX_URL": package_index, "PIP_EXTRA_INDEX_URL": "", "PIP_FIND_LINKS": "",
                        "PIP_NO_CACHE_DIR": "1", "PIP_RETRIES": "0"}.items():
        monkeypatch.setenv(name, value)
    return package_index


EXAMPLES = Path(__file__).parent.parent / "ensembles"
EXAMPLE_FILES = ("text_embeddings.py", "image_classifier.py", "resnet_pytorch.py", "resnet_tensorrt.py",
                 "bert_torchscript.py")


class ExampleArchives:
    """Each example in ensembles/ built once per target for the whole run, however many tests use it: under
    pytest-xdist the workers share ``root``, and the first to need an archive builds it while the others wait
    on its lock (filelock), then read where it is."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.built: dict[tuple[str, str], Path] = {}

    def ensemble(self, file: str) -> Ensemble:
        from conch.builder.discover import discover

        (ens,) = discover([EXAMPLES / file])
        return ens

    def archive(self, file: str, target: str) -> Path:
        from filelock import FileLock

        from conch.builder.repository_build import build_ensemble

        if (file, target) not in self.built:
            record = self.root / f"{Path(file).stem}-{target}.built"
            with FileLock(self.root / f"{Path(file).stem}-{target}.lock"):
                if not record.is_file():
                    built = build_ensemble(self.ensemble(file), self.root / target, target)
                    tmp = record.with_suffix(f".{os.getpid()}")
                    tmp.write_text(str(built))
                    tmp.replace(record)
            self.built[file, target] = Path(record.read_text())
        return self.built[file, target]


def run_folder(config: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of this test run: in a pytest-xdist worker, the one every worker shares (each worker's own
    temporary folder is ``popen-gwN`` inside it); otherwise this session's own."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if hasattr(config, "workerinput") else base


@pytest.fixture(scope="session")
def examples(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> ExampleArchives:
    root = run_folder(request.config, tmp_path_factory) / "examples"
    root.mkdir(exist_ok=True)
    return ExampleArchives(root)


SERVE_READY_S = 180.0  # a `conch serve` start on a loaded machine: tritonserver's start, the front's, loads up front


def ready_line(proc: Any, timeout: float = SERVE_READY_S) -> dict[str, Any]:
    """The ready JSON line a `conch serve` subprocess prints on its stdout pipe, waited for at most ``timeout``
    seconds: a start that hangs, or a line left in a buffer, fails the test with the process's stderr instead of
    waiting out pytest-timeout."""
    import json
    import select

    readable, _, _ = select.select([proc.stdout], [], [], timeout)
    line = proc.stdout.readline() if readable else ""
    if not line:
        proc.kill()
        _, err = proc.communicate(timeout=30)
        pytest.fail(f"`conch serve` printed no ready line within {timeout:g} s (exit {proc.returncode}); its stderr "
                    f"ends:\n{(err or '')[-4000:]}")
    found: dict[str, Any] = json.loads(line)
    return found
