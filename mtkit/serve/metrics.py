"""The server's metrics in Prometheus' text format (`GET /metrics`), kept by prometheus_client
in a registry of the app's own (two apps in one process count apart)."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)

from mtkit.serve.batcher import BatchReport

# Latency buckets (seconds): a sentence decodes in tens of milliseconds on a GPU, seconds on
# a busy CPU.
LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


class ServerMetrics:
    """Requests by endpoint and status, sentences and tokens translated, the queue's depth,
    the sentences being decoded, batch sizes and request latency."""

    def __init__(self, queued: Callable[[], int], decoding: Callable[[], int]) -> None:
        # Each series' `_created` twin (a timestamp) doubles the exposition and no dashboard
        # reads it. prometheus_client's switch is process-wide and has no per-registry form:
        # flipped when a server makes its metrics, not by importing this module.
        disable_created_metrics()
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("mtkit_requests", "HTTP requests answered",
                                ["path", "status"], registry=r)
        self.sentences = Counter("mtkit_sentences", "sentences translated", registry=r)
        self.tokens = Counter("mtkit_target_tokens", "target tokens of the best hypotheses",
                              registry=r)
        self.batch_sentences = Histogram("mtkit_batch_sentences", "sentences per decoding "
                                         "pass (merged across requests)", buckets=SIZES,
                                         registry=r)
        self.batch_requests = Histogram("mtkit_batch_requests", "requests per decoding pass",
                                        buckets=SIZES, registry=r)
        self.latency = Histogram("mtkit_request_seconds", "time to answer a translation "
                                 "request", ["path"], buckets=LATENCY, registry=r)
        depth = Gauge("mtkit_queue_sentences", "sentences waiting to be decoded", registry=r)
        depth.set_function(queued)
        running = Gauge("mtkit_decoding_sentences", "sentences of the requests being decoded",
                        registry=r)
        running.set_function(decoding)

    def batch(self, report: BatchReport) -> None:
        self.sentences.inc(report.sentences)
        self.tokens.inc(report.tokens)
        self.batch_sentences.observe(report.sentences)
        self.batch_requests.observe(report.jobs)

    def text(self) -> tuple[bytes, str]:
        """The exposition and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
