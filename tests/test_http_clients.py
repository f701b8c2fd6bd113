"""One HTTP client library per job (docs/architecture.md, "HTTP clients"): httpx makes every sync call of conch,
aiohttp only the local MME's hop to Triton, geventhttpclient only the Locust load of `conch bench`; `requests` is
neither imported by conch nor one of its dependencies (read from the source, as text); and conch's sync client,
``conch.triton.http_client.sync_client``, loads TLS certificates only where it calls an https:// server."""

from __future__ import annotations

import ast
import shutil
import ssl
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
import tomllib
from packaging.requirements import Requirement

from conch.triton.http_client import sync_client

ROOT = Path(__file__).resolve().parent.parent
CONCH = ROOT / "conch"

# client library -> the only modules of conch that may import it (an empty set: none)
ALLOWED: dict[str, set[str]] = {
    "requests": set(),
    "urllib3": set(),
    "aiohttp": {"conch/endpoint/hop.py"},
    "geventhttpclient": {"conch/perf/load/locust_proc.py"},
}


def top_level_imports(path: Path) -> Iterator[tuple[int, str]]:
    """(line, top-level package) of every import in the file, in functions too, ``import_module("x")`` included."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, a.name.split(".")[0]) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            yield node.lineno, node.module.split(".")[0]
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"):
            yield node.lineno, node.args[0].value.split(".")[0]


def importers(package: str, root: Path = CONCH) -> set[str]:
    return {f"{path.relative_to(root.parent).as_posix()}:{line}" for path in sorted(root.rglob("*.py"))
            for line, name in top_level_imports(path) if name == package}


def test_each_http_client_is_imported_only_where_its_job_is() -> None:
    for package, allowed in ALLOWED.items():
        found = importers(package)
        strays = sorted(where for where in found if where.rpartition(":")[0] not in allowed)
        assert not strays, f"{package} is imported outside its job ({sorted(allowed) or 'nowhere'}): {strays}"
        assert {where.rpartition(":")[0] for where in found} == allowed, f"{package}'s one user moved: update ALLOWED"


def test_requests_is_not_a_dependency_of_conch() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    listed = [*project["dependencies"], *(r for extra in project["optional-dependencies"].values() for r in extra)]
    names = {Requirement(r).name.lower() for r in listed}
    assert "requests" not in names
    assert {"httpx", "aiohttp"} <= names


def test_the_check_sees_each_form_of_import(tmp_path: Path) -> None:
    package = tmp_path / "conch"
    package.mkdir()
    (package / "a.py").write_text("import requests.adapters\n")
    (package / "b.py").write_text("def f():\n    from requests import Session\n")
    (package / "c.py").write_text("import importlib\nimportlib.import_module('requests')\n")
    (package / "d.py").write_text("from . import requests\nimport httpx\n")  # a module of its own, and another client
    assert importers("requests", package) == {"conch/a.py:1", "conch/b.py:2", "conch/c.py:2"}


@pytest.fixture
def server(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    """A local HTTP server answering 200 to GET; https (a self-signed certificate) when the test asks for it."""
    class Answer(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    scheme = "http"
    if getattr(request, "param", "http") == "https":
        if shutil.which("openssl") is None:
            pytest.skip("no openssl command to make a certificate with")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                        "/CN=127.0.0.1", "-keyout", str(tmp_path / "key.pem"), "-out", str(tmp_path / "cert.pem")],
                       check=True, capture_output=True)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
        httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
        scheme = "https"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"{scheme}://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_the_sync_client_talks_plain_http(server: str) -> None:
    with sync_client(server, timeout=10) as http:
        assert [http.get(f"{server}/ping").text for _ in range(2)] == ["ok", "ok"]


@pytest.mark.parametrize("server", ["https"], indirect=True)
def test_the_sync_client_verifies_an_https_server(server: str) -> None:
    """Only a client for http:// servers goes without a CA bundle: one that calls an https:// server checks its
    certificate (this one is self-signed, so the call fails)."""
    with sync_client("http://127.0.0.1:9", server, timeout=10) as http, \
            pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        http.get(f"{server}/ping")
