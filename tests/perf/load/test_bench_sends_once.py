"""conch bench's boto3 transport sends each request once: botocore's ``retries={"max_attempts": 1}`` means one
*retry* (two attempts; botocore ``args.py`` ``_compute_retry_max_attempts``), so an endpoint's 500 was sent again
and counted as one request. A real HTTP server on loopback counts what arrives."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from conch.perf.load.spec import LoadSpec, Target
from conch.perf.load.stages import Stage


class Failing(BaseHTTPRequestHandler):
    arrived = 0

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        type(self).arrived += 1
        body = json.dumps({"ErrorCode": "InternalFailure", "Message": "boom"}).encode()
        self.send_response(500)
        self.send_header("Content-Type", "application/json")
        self.send_header("x-amzn-ErrorType", "InternalFailure")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


SEND = """
import json, sys
from conch.perf.load.locust_proc import boto3_transport
from conch.perf.load.spec import LoadSpec
send = boto3_transport(LoadSpec.from_json(json.loads(sys.argv[1])))
status, body, _ = send("a.tar.gz", b'{}', "application/json")
print(status)
"""


def test_a_500_is_counted_once_and_not_sent_again() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Failing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_port}"
        spec = LoadSpec("boto3", url, [Target("a.tar.gz", [])], [Stage(1, 1, 1)], timeout=30)
        keys = {"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x"}
        done = subprocess.run([sys.executable, "-c", SEND, json.dumps(spec.to_json())], capture_output=True,
                              text=True, timeout=120, env={**os.environ, **keys})
    finally:
        server.shutdown()
        server.server_close()
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "500"
    assert Failing.arrived == 1
