"""The load generator process: Locust as a library (users, a stages ``LoadTestShape``, master/worker).

Run only as its own process (``python -m conch.perf.load.locust_proc local|master|worker ...``):
``import locust`` monkey-patches the interpreter with gevent. It hands results back as a JSON file and
progress as JSON lines on stdout. Every request is recorded (start time, latency, outcome, TargetModel) so
the report can cut the run into stages afterwards; workers ship their records to the master.
"""

from __future__ import annotations

import argparse
import base64
import json
import random
import sys
import time
from collections.abc import Callable
from itertools import accumulate
from pathlib import Path
from typing import Any

import gevent
import locust  # patches sockets, ssl and threads with gevent before requests, urllib3 or boto3 are imported
import numpy as np
from locust import LoadTestShape, User, task
from locust.env import Environment
from locust.runners import MasterRunner, Runner, WorkerRunner

from conch.ensembles.samples import check_from_json, check_of, compare, decode_array
from conch.perf.load.spec import LoadSpec, Request, route_header
from conch.perf.load.stages import Stage, stage_index
from conch.triton.kserve_routes import HEADER_LENGTH, infer_path, request_headers, response_content_type
from conch.wire import component_name, parse_binary_response, parse_json_response

WAIT_FOR_WORKERS_S = 60.0
FLUSH_TIMEOUT_S = 30.0
SPEC: LoadSpec | None = None
RECORDS: list[list[Any]] = []
FLUSHED: set[str] = set()  # workers that sent their last records


class StagesShape(LoadTestShape):
    """Seed 003's stages: each runs until its ``duration`` (seconds from the start) with its user count."""

    def __init__(self, stages: list[Stage]) -> None:
        super().__init__()
        self.stages = stages

    def tick(self) -> tuple[int, float] | None:
        # Past the last stage it holds: the run is ended by `drive`, which stops users gracefully and
        # collects records (Locust's own stop makes workers sleep stop_timeout before taking messages).
        index = stage_index(self.stages, self.get_run_time())
        stage = self.stages[-1 if index is None else index]
        return stage.users, stage.spawn_rate


Send = Callable[[str, bytes, str], tuple[int, bytes, str]]


def http_transport(spec: LoadSpec) -> Send:
    """The SageMaker runtime API (``/endpoints/<name>/invocations`` + TargetModel header) or KServe v2."""
    from geventhttpclient import HTTPClient

    assert spec.url
    client = HTTPClient.from_url(spec.url, concurrency=1, network_timeout=spec.timeout, connection_timeout=10)
    # Each target's route made (and its name checked) once per user, not once per request.
    paths = {t.name: infer_path(t.name) for t in spec.targets} if spec.kind == "kserve" else {}
    routes = {t.name: route_header(spec, t.name) for t in spec.targets}

    def send(target: str, body: bytes, content_type: str) -> tuple[int, bytes, str]:
        if spec.kind == "kserve":
            response = client.post(paths[target], body=body, headers=request_headers(content_type))
            content, length = response.read(), response.get(HEADER_LENGTH.lower())
            return response.status_code, content, response_content_type(str(length) if length else None)
        response = client.post(f"/endpoints/{spec.endpoint}/invocations", body=body,
                               headers={"Content-Type": content_type, **routes[target]})
        return response.status_code, response.read(), str(response.get("content-type") or "")

    return send


def boto3_transport(spec: LoadSpec) -> Send:
    """boto3's sagemaker-runtime ``invoke_endpoint`` (a deployed endpoint, or ``url`` as its endpoint_url)."""
    import boto3
    from botocore.config import Config
    from botocore.exceptions import ClientError

    config = Config(region_name=spec.region, retries={"total_max_attempts": 1}, read_timeout=spec.timeout,
                    connect_timeout=10)
    runtime = boto3.session.Session().client("sagemaker-runtime", endpoint_url=spec.url, config=config)
    routes = {t.name: ({"InferenceComponentName": component_name(spec.endpoint, t.name)} if spec.components
                       else {"TargetModel": t.name}) for t in spec.targets}

    def send(target: str, body: bytes, content_type: str) -> tuple[int, bytes, str]:
        try:
            response = runtime.invoke_endpoint(EndpointName=spec.endpoint, ContentType=content_type, Body=body,
                                               **routes[target])
        except ClientError as exc:
            error = exc.response
            status = error.get("OriginalStatusCode") or error.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
            message = error.get("OriginalMessage") or error.get("Error", {}).get("Message", "")
            return int(status or 0), str(message).encode(), "text/plain"
        return 200, response["Body"].read(), str(response.get("ContentType", ""))

    return send


class Prepared:
    """A request with its body decoded and its expected outputs ready to compare."""

    def __init__(self, request: Request) -> None:
        self.sample = request.sample
        self.body = base64.b64decode(request.body)
        self.content_type = request.content_type
        self.body_kind = request.body_kind
        self.expected = {k: decode_array(v) for k, v in request.expected.items()}
        self.checks = {k: check_from_json(v) for k, v in request.checks.items()}

    def wrong(self, content: bytes, content_type: str) -> str | None:
        """Why the answer is wrong, or None when every expected output matches."""
        try:
            got = (parse_json_response(content) if self.body_kind == "json" and "json" in content_type
                   else parse_binary_response(content, content_type))
        except Exception as exc:  # a malformed answer is a failed request, whatever the parser raised
            return f"unreadable answer: {exc}"
        for name, want in self.expected.items():
            if name not in got:
                return f"wrong answer: {name} missing"
            verdict = compare(name, np.asarray(got[name]), want, check_of(self.checks, name, want))
            if not verdict.passed:
                return f"wrong answer: {name}: {verdict.detail}"
        return None


PREPARED: list[list[Prepared]] = []


def prepared(spec: LoadSpec) -> list[list[Prepared]]:
    """Each target's requests, decoded once per process (copies of an archive share theirs)."""
    if not PREPARED:
        seen: dict[str, Prepared] = {}
        for target in spec.targets:
            keys = [json.dumps([r.body, r.expected, r.checks], sort_keys=True) for r in target.requests]
            for key, r in zip(keys, target.requests, strict=True):
                if key not in seen:
                    seen[key] = Prepared(r)
            PREPARED.append([seen[key] for key in keys])
    return PREPARED


def warm(spec: LoadSpec) -> None:
    """Decode the payloads and import the transport before the stages' clock starts (the master waits for each
    worker's ``conch_ready``). Done by the first user instead, it blocks the process's one gevent loop, on a busy
    machine for seconds: a worker whose heartbeat is late past Locust's liveness (3 s) is counted missing, and a
    shape tick that starts the users while it is sends it none (the suspected cause of one test run's bench with
    a worker and no request: docs/testing.md)."""
    prepared(spec)
    if spec.kind == "boto3":
        import boto3  # noqa: F401
    else:
        import geventhttpclient  # noqa: F401


class Failure(Exception):
    pass


class EnsembleUser(User):
    """Invokes random TargetModels (uniform, or Zipf-skewed by the order given) with their sample payloads."""

    def wait_time(self) -> float:
        assert SPEC is not None
        return SPEC.wait

    def on_start(self) -> None:
        assert SPEC is not None
        self.spec = SPEC
        self.send = boto3_transport(SPEC) if SPEC.kind == "boto3" else http_transport(SPEC)
        self.rng = random.Random(hash((SPEC.seed, id(self), time.time_ns())))
        self.requests = prepared(SPEC)
        weights = [1.0 / (rank + 1) ** SPEC.zipf for rank in range(len(SPEC.targets))]
        self.cumulative = list(accumulate(weights))

    @task
    def invoke(self) -> None:
        index = self.rng.choices(range(len(self.requests)), cum_weights=self.cumulative)[0]
        request = self.rng.choice(self.requests[index])
        target = self.spec.targets[index].name
        start, clock = time.time(), time.perf_counter()
        error, length = None, 0
        try:
            status, content, content_type = self.send(target, request.body, request.content_type)
            length = len(content)
            if status != 200:
                error = f"HTTP {status}: {content[:160].decode('utf-8', 'replace')}"
            elif self.spec.check:
                error = request.wrong(content, content_type)
        except Exception as exc:  # timeouts, refused connections: each one a failed request
            error = f"{type(exc).__name__}: {exc}"
        self.environment.events.request.fire(
            request_type=self.spec.kind, name=target, response_time=(time.perf_counter() - clock) * 1000,
            response_length=length, exception=Failure(error) if error else None,
            context={"start": start, "target": index},
        )


def record(response_time: float, exception: Exception | None, context: dict[str, Any], **_: Any) -> None:
    RECORDS.append([context["start"], round(response_time, 3), exception is None, context["target"],
                    str(exception) if exception else None])


def drain() -> list[list[Any]]:
    taken = RECORDS[:]
    del RECORDS[:]
    return taken


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def environment(spec: LoadSpec | None, stop_timeout: float) -> Environment:
    """Users stopping at the end finish the request they are in (up to ``stop_timeout``), so that slow first
    calls, which are what an MME bench is about, are counted rather than cut off."""
    env = Environment(user_classes=[EnsembleUser], shape_class=StagesShape(spec.stages) if spec else None,
                      stop_timeout=stop_timeout)
    env.events.request.add_listener(record)
    return env


def drive(env: Environment, runner: Runner, spec: LoadSpec, out: Path, workers: int) -> None:
    """Run the shape to its end, reporting progress; then write every record to ``out``."""
    timeline: list[list[float]] = []
    started = time.time()
    end = started + spec.duration()
    runner.start_shape()
    while time.time() < end:
        timeline.append([time.time(), runner.user_count])
        total = runner.stats.total
        emit("progress", elapsed=time.time() - started, users=runner.user_count, requests=total.num_requests,
             failures=total.num_failures, rps=total.current_rps)
        gevent.sleep(min(0.5, max(0.0, end - time.time())))  # stop at the last stage's end, not up to 0.5 s after
    if isinstance(runner, MasterRunner):
        collect_from_workers(runner, spec.timeout + FLUSH_TIMEOUT_S)
    else:
        runner.stop()  # users finish the request they are in (stop_timeout)
    timeline.append([time.time(), 0])
    result = {"started": started, "ended": time.time(), "timeline": timeline, "records": RECORDS,
              "workers": workers, "locust": locust.__version__}
    out.write_text(json.dumps(result))
    emit("done", requests=len(RECORDS))


def collect_from_workers(runner: MasterRunner, limit: float) -> None:
    """Ask every worker to stop its users gracefully and send its last records; wait for all (or ``limit``)."""
    if runner.shape_greenlet is not None:
        runner.shape_greenlet.kill(block=True)
        runner.shape_greenlet = None
    pending = {c.id for c in runner.clients.all}
    runner.send_message("conch_finish")
    deadline = time.time() + limit
    while pending & {c.id for c in runner.clients.all} and time.time() < deadline:
        gevent.sleep(0.1)
        pending -= FLUSHED


def run_master(spec: LoadSpec, out: Path, workers: int, bind: str, port: int) -> None:
    env = environment(spec, spec.timeout)
    runner = env.create_master_runner(master_bind_host=bind, master_bind_port=port)
    ready: set[str] = set()
    runner.register_message("conch_ready", lambda environment, msg: ready.add(msg.node_id))

    def take_records(environment: Environment, msg: Any) -> None:
        RECORDS.extend(msg.data["records"])
        FLUSHED.add(msg.node_id)

    runner.register_message("conch_records", take_records)
    env.events.worker_report.add_listener(lambda client_id, data: RECORDS.extend(data.get("conch_records", [])))
    emit("master", port=runner.server.port)  # the port it bound: 0 asks the system for a free one
    deadline = time.time() + WAIT_FOR_WORKERS_S
    while runner.worker_count < workers and time.time() < deadline:
        gevent.sleep(0.2)
    if runner.worker_count < workers:
        emit("error", message=f"only {runner.worker_count} of {workers} workers connected within "
                              f"{WAIT_FOR_WORKERS_S:.0f} s")
        runner.quit()
        sys.exit(3)
    runner.send_message("conch_spec", spec.to_json())
    while len(ready) < runner.worker_count and time.time() < deadline + 30:
        gevent.sleep(0.1)
    drive(env, runner, spec, out, runner.worker_count)
    runner.quit()


def run_worker(master_host: str, port: int, stop_timeout: float) -> None:
    env = environment(None, stop_timeout)
    runner = env.create_worker_runner(master_host, port)
    assert isinstance(runner, WorkerRunner)

    def take_spec(environment: Environment, msg: Any) -> None:
        global SPEC
        SPEC = LoadSpec.from_json(msg.data)
        warm(SPEC)
        runner.send_message("conch_ready", None)

    runner.register_message("conch_spec", take_spec)
    def finish(environment: Environment, msg: Any) -> None:
        runner.stop()  # users finish the request they are in (stop_timeout), then the rest is sent
        runner.send_message("conch_records", {"records": drain()})

    runner.register_message("conch_finish", finish, concurrent=True)
    env.events.report_to_master.add_listener(lambda client_id, data: data.__setitem__("conch_records", drain()))
    runner.greenlet.join()


def run_local(spec: LoadSpec, out: Path) -> None:
    warm(spec)
    env = environment(spec, spec.timeout)
    drive(env, env.create_local_runner(), spec, out, 0)


def main(argv: list[str] | None = None) -> None:
    global SPEC
    p = argparse.ArgumentParser(prog="python -m conch.perf.load.locust_proc")
    p.add_argument("mode", choices=("local", "master", "worker"))
    p.add_argument("--spec", type=Path)
    p.add_argument("--out", type=Path)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--bind", default="127.0.0.1")
    p.add_argument("--master-host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=5557)
    p.add_argument("--stop-timeout", type=float, default=120.0, help="worker: seconds a request may finish in")
    args = p.parse_args(argv)
    if args.mode == "worker":
        run_worker(args.master_host, args.port, args.stop_timeout)
        return
    SPEC = LoadSpec.from_json(json.loads(args.spec.read_text()))
    if args.mode == "local":
        run_local(SPEC, args.out)
    else:
        run_master(SPEC, args.out, args.workers, args.bind, args.port)


if __name__ == "__main__":
    main()
