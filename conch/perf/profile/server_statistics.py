"""The server side of a profile: Triton's statistics extension and model configs over KServe v2 HTTP
(routes from conch.triton.kserve_routes), and its summary metrics (Prometheus text) when a metrics port is given."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from conch.errors import ServeError
from conch.triton.http_client import sync_client
from conch.triton.kserve_routes import model_path
from conch.triton.mme_contract import error_text

# Triton's summary metrics (--metrics-config summary_latencies=true): category -> metric name
SUMMARIES = {"request": "nv_inference_request_summary_us", "queue": "nv_inference_queue_summary_us",
             "compute_input": "nv_inference_compute_input_summary_us",
             "compute_infer": "nv_inference_compute_infer_summary_us",
             "compute_output": "nv_inference_compute_output_summary_us"}
QUANTILES = {"0.5": "p50", "0.99": "p99"}
METRICS_ARGS = ("--allow-metrics=true", "--allow-gpu-metrics=false", "--allow-cpu-metrics=false",
                "--metrics-address=127.0.0.1", "--metrics-config=summary_latencies=true")


@dataclass(frozen=True)
class StatsEndpoint:
    """A KServe v2 HTTP server with the statistics extension (``http_url``), and optionally its metrics."""

    http_url: str
    metrics_url: str | None = None
    timeout: float = 30.0

    def _client(self) -> httpx.Client:
        return sync_client(self.http_url, *([self.metrics_url] if self.metrics_url else []), timeout=self.timeout)

    def snapshot(self, models: Iterable[str]) -> dict[str, Mapping[str, Any]]:
        """These models' cumulative statistics (their entries of ``model_stats``), keyed by model name (version 1
        wins over others only by order: conch's archives hold one version per model). Asked one model at a time:
        with --model-namespacing (SageMaker's image from 23.04) Triton 2.51 answers the all-models form with
        "unknown model" for a model held in another repository."""
        found: dict[str, Mapping[str, Any]] = {}
        paths = [model_path(model, "stats") for model in models]
        with self._client() as session:
            for path in paths:
                try:
                    answer = session.get(f"{self.http_url.rstrip('/')}{path}")
                    if answer.status_code != 200:  # said in one line (httpx's raise_for_status adds a link)
                        raise ValueError(f"[{answer.status_code}] {error_text(answer.content, answer.reason_phrase)}")
                    found.update({str(m["name"]): m for m in answer.json().get("model_stats", [])})
                except (httpx.HTTPError, httpx.InvalidURL, ValueError) as exc:  # no answer, an error status, not JSON
                    raise ServeError(f"{self.http_url} did not answer GET /v2/models/stats ({exc}); give the KServe "
                                     "v2 HTTP address of a Triton with the statistics extension") from None
        return found

    def config(self, model: str) -> dict[str, Any]:
        path = model_path(model, "config")
        try:
            with self._client() as session:
                answer = session.get(f"{self.http_url.rstrip('/')}{path}")
        except (httpx.HTTPError, httpx.InvalidURL) as exc:  # the server did not answer
            raise ServeError(f"{self.http_url} did not answer GET /v2/models/{model}/config ({exc}); give the KServe "
                             "v2 HTTP address of a running Triton") from None
        if answer.status_code != 200:  # it did, with Triton's {"error": ...}
            why = error_text(answer.content, answer.reason_phrase or "")
            raise ServeError(f"{self.http_url} has no model {model!r} loaded ([{answer.status_code}] {why}); give the "
                             "ensemble's name as the server knows it (--model)") from None
        found: dict[str, Any] = answer.json()
        return found

    def quantiles(self) -> dict[str, dict[str, dict[str, float]]]:
        """model -> category -> {p50, p99} in ms from the summary metrics; empty when there are none."""
        if not self.metrics_url:
            return {}
        try:
            with self._client() as session:
                return parse_summaries(session.get(f"{self.metrics_url.rstrip('/')}/metrics").text)
        except (httpx.HTTPError, httpx.InvalidURL, ValueError):  # no answer, or not Prometheus text
            return {}


def parse_summaries(text: str) -> dict[str, dict[str, dict[str, float]]]:
    """Quantiles of Triton's latency summaries in Prometheus text (prometheus_client's parser), in milliseconds
    (NaN: no observation)."""
    names = {metric: category for category, metric in SUMMARIES.items()}
    found: dict[str, dict[str, dict[str, float]]] = {}
    for sample in (s for family in text_string_to_metric_families(text) for s in family.samples):
        quantile = QUANTILES.get(sample.labels.get("quantile", ""))
        if sample.name not in names or quantile is None or "model" not in sample.labels or sample.value != sample.value:
            continue  # another metric or figure, or NaN: nothing observed in the window
        found.setdefault(sample.labels["model"], {}).setdefault(names[sample.name], {})[quantile] = sample.value / 1000
    return found
