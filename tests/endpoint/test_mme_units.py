"""The local MME's pure parts: sizes on the command line, TargetModel keys, sources, metrics bookkeeping."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from conch import ServeError
from conch.cli.flags import size
from conch.endpoint import LocalMME
from conch.endpoint.metrics import BUCKETS, TIMES, Metrics
from conch.endpoint.protocol import ValidationError
from conch.endpoint.sources import FolderSource, S3Source, checked_key, open_source


@pytest.mark.parametrize(("text", "expected"), [("6GiB", 6 * 2**30), ("500MB", 500 * 10**6), ("1.5g", 1_500_000_000),
                                                ("2000", 2000), ("64 MiB", 64 * 2**20)])
def test_sizes(text: str, expected: int) -> None:
    assert size(text) == expected


@pytest.mark.parametrize("text", ["lots", "6 GiBs", "-1GB", ""])
def test_bad_sizes_say_how_to_write_one(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="6GiB"):
        size(text)


@pytest.mark.parametrize("key", ["../x.tar.gz", "/etc/passwd", "a//b.tar.gz", "a/./b.tar.gz", ""])
def test_target_models_must_be_keys_under_the_prefix(key: str) -> None:
    with pytest.raises(ValidationError, match="not a key relative to the model prefix"):
        checked_key(key)
    assert checked_key("team/a.tar.gz") == "team/a.tar.gz"


def test_sources_from_a_folder_or_an_s3_prefix(tmp_path: Path) -> None:
    assert open_source(tmp_path) == FolderSource(tmp_path.resolve())
    assert open_source("s3://bucket/some/prefix/", "http://127.0.0.1:5000") == S3Source(
        "bucket", "some/prefix/", "http://127.0.0.1:5000")
    assert open_source("s3://bucket").describe() == "s3://bucket/"  # type: ignore[union-attr]
    with pytest.raises(ServeError, match="not a folder of archives nor an s3:// prefix"):
        open_source(tmp_path / "missing")


def test_an_s3_source_with_an_endpoint_url_boto3_would_refuse_is_refused_at_start() -> None:
    with pytest.raises(ServeError, match=r"--s3-endpoint-url: endpoint URL 'localhost:9000': give it with its "
                                         r"scheme and host, e\.g\. http://127\.0\.0\.1:5000"):
        open_source("s3://bucket/models/", "localhost:9000")


def test_an_s3_source_downloads_every_archive_with_one_client(
        moto_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import boto3

    from conch.aws import AwsTarget

    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(key, "testing")
    s3 = boto3.client("s3", endpoint_url=moto_server, region_name="us-east-1")
    s3.create_bucket(Bucket="conch-one-client")
    for name in ("a.tar.gz", "b.tar.gz"):
        s3.put_object(Bucket="conch-one-client", Key=f"models/{name}", Body=name.encode())
    made: list[str] = []
    client = AwsTarget.client

    def counted(self: AwsTarget, service: str, **kwargs: float) -> object:
        made.append(service)
        return client(self, service, **kwargs)

    monkeypatch.setattr(AwsTarget, "client", counted)
    source = open_source("s3://conch-one-client/models/", s3_endpoint_url=moto_server)
    for name in ("a.tar.gz", "b.tar.gz"):
        source.fetch(name, tmp_path / name)
        assert (tmp_path / name).read_bytes() == name.encode()
    assert made == ["s3"]  # a boto3 client costs ~0.1 s of CPU: not one per cold load


def test_a_missing_archive_in_a_folder_names_the_target_model(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="TargetModel 'x.tar.gz'"):
        FolderSource(tmp_path).fetch("x.tar.gz", tmp_path / "dest")


def test_metrics_keep_sagemakers_names_and_the_peak_of_loaded_models() -> None:
    metrics = Metrics()
    for count in (1, 3, 2):
        metrics.set_loaded(count)
    metrics.time("ModelLoadingTime", 0.5)
    metrics.hit.inc()
    for _ in range(3):
        metrics.miss.inc()
    metrics.unloads.labels("max_loaded").inc()
    snapshot = metrics.snapshot()
    assert snapshot["LoadedModelCount"] == 2 and snapshot["LoadedModelCountPeak"] == 3
    assert snapshot["ModelLoadingTime"]["count"] == 1 and snapshot["ModelLoadingTime"]["p50_s"] == 0.5
    assert snapshot["ModelCacheHit"] == {"hits": 1, "misses": 3, "rate": 0.25}
    assert snapshot["ModelUnloads"] == {"max_loaded": 1}
    text = metrics.prometheus().decode()
    assert "LoadedModelCount 2.0" in text and 'ModelCacheHit_total{hit="1"} 1.0' in text


def test_step_names_are_isolate_or_shared(tmp_path: Path) -> None:
    with pytest.raises(ServeError, match=r"step_names 'unique': choose 'shared' or 'isolate'"):
        LocalMME(tmp_path, step_names="unique")


def test_max_restarts_below_zero_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ServeError, match=r"max_restarts -1: give 0"):
        LocalMME(tmp_path, max_restarts=-1)


def test_the_per_call_metrics_are_exposed_as_prometheus_clients_own_counter_and_histogram_would_be() -> None:
    """ModelCacheHit, Invocations and ModelLatency: the same names, HELP, TYPE, labels (every one from the start),
    buckets, values and ``_created`` samples, in the same place, as prometheus_client's Counter and Histogram given
    the same calls (only the creation times differ); /metrics.json reads the same values back."""
    metrics = Metrics()
    registry = CollectorRegistry(auto_describe=True)
    latency = Histogram("ModelLatency", TIMES["ModelLatency"], registry=registry, buckets=BUCKETS)
    hits = Counter("ModelCacheHit", "invocations by whether their TargetModel was loaded already", ["hit"],
                   registry=registry)
    answered = Counter("Invocations", "invocations answered, by HTTP status class", ["status"], registry=registry)
    for child in (hits.labels("1"), hits.labels("0"), *(answered.labels(s) for s in ("2XX", "4XX", "5XX"))):
        child.inc(0)
    for seconds in (0.0004, 0.001, 0.0011, 0.3, 7.0, 500.0, 0.001):
        metrics.time("ModelLatency", seconds)
        latency.observe(seconds)
    for _ in range(5):
        metrics.hit.inc()
        hits.labels("1").inc()
    metrics.miss.inc()
    hits.labels("0").inc()
    for status, times in (("2XX", 4), ("5XX", 2)):
        for _ in range(times):
            metrics.answered[status].inc()
            answered.labels(status).inc()

    def without_created(text: bytes) -> list[str]:
        return [re.sub(r"(_created(\{[^}]*\})?) \S+$", r"\1 T", line) for line in text.decode().splitlines()]

    ours = without_created(metrics.prometheus())
    expected = without_created(generate_latest(registry))
    start = ours.index(expected[0])
    assert ours[start:start + len(expected)] == expected
    assert ours[start - 1] == "ModelUnloadingTime_created T"  # where the prometheus_client objects were
    snapshot = metrics.snapshot()
    assert snapshot["ModelLatency"]["count"] == 7 and snapshot["ModelLatency"]["sum_s"] == pytest.approx(507.3035)
    assert snapshot["ModelCacheHit"] == {"hits": 5, "misses": 1, "rate": 5 / 6}
    assert snapshot["Invocations"] == {"2XX": 4, "4XX": 0, "5XX": 2}


def test_every_count_a_run_reports_is_exposed_and_read_back_the_same() -> None:
    """Each count of ``COUNTS`` is a Prometheus counter at /metrics and the same number in /metrics.json."""
    from conch.endpoint.metrics import COUNTS

    metrics = Metrics()
    for step, name in enumerate(COUNTS.values()):
        counter = {"TritonRestarts": metrics.restarts, "TritonLookupRetries": metrics.lookup_retries,
                   "TritonLookupMisses": metrics.lookup_misses, "StepNameCollisions": metrics.collisions,
                   "ModelNotReady": metrics.not_ready, "InvocationTimeouts": metrics.timeouts}[name]
        counter.inc(step)
    text = metrics.prometheus().decode()
    snapshot = metrics.snapshot()
    for step, name in enumerate(COUNTS.values()):
        assert f"# TYPE {name}_total counter" in text and f"\n{name}_total {float(step)}\n" in text
        assert snapshot[name] == step
