"""Server metrics through ``prometheus_client``: the server's own counters and gauges, and the
process's (CPU, memory, open files) and the Python platform's.

Each server has its own registry, so several servers in one process (tests) keep apart.
Hot paths only bump plain counters under a lock; the metric families are built when scraped.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector

from changestream.clock import now_us

CONTENT_TYPE = CONTENT_TYPE_LATEST


@dataclass(slots=True)
class OpenStream:
    """One streaming response in flight: its database, what it has sent, and how far it is."""

    database: str
    stream: str
    #: Timestamp (microseconds) through which the client has been sent everything; 0 if unknown.
    position: int = 0
    records: Counter[str] = field(default_factory=Counter)


class Metrics(Collector):
    """Counters and gauges of one server, safe to update from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._commits: Counter[str] = Counter()
        self._rows: Counter[str] = Counter()
        self._requests: Counter[tuple[str, int]] = Counter()
        self._records: Counter[tuple[str, str]] = Counter()
        self._streams: dict[int, OpenStream] = {}
        self._partitions: list[tuple[str, str, int]] = []
        self._scrape = threading.Lock()
        self.registry = CollectorRegistry(auto_describe=False)
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        self.registry.register(self)

    def committed(self, database: str, rows: int) -> None:
        with self._lock:
            self._commits[database] += 1
            self._rows[database] += rows

    def request(self, route: str, status: int) -> None:
        with self._lock:
            self._requests[(route, status)] += 1

    def stream_opened(self, database: str, stream: str = "") -> OpenStream:
        entry = OpenStream(database, stream)
        with self._lock:
            self._streams[id(entry)] = entry
        return entry

    def stream_closed(self, entry: OpenStream) -> None:
        with self._lock:
            self._streams.pop(id(entry), None)
            for kind, count in entry.records.items():
                self._records[(entry.database, kind)] += count

    def render(self, partitions: Iterable[tuple[str, str, int]]) -> bytes:
        """The exposition text; ``partitions`` gives (database, stream, live partitions)."""
        with self._scrape:
            self._partitions = sorted(partitions)
            return generate_latest(self.registry)

    def collect(self) -> Iterator[Metric]:
        now = now_us()
        with self._lock:
            streams = list(self._streams.values())
            records = Counter(self._records)
            for entry in streams:
                for kind, count in entry.records.items():
                    records[(entry.database, kind)] += count
            commits, rows = dict(self._commits), dict(self._rows)
            requests = dict(self._requests)
        open_streams: Counter[str] = Counter(entry.database for entry in streams)
        lag: dict[tuple[str, str], float] = {}
        for entry in streams:
            if entry.stream and entry.position:
                key = (entry.database, entry.stream)
                lag[key] = max(lag.get(key, 0.0), max(now - entry.position, 0) / 1e6)

        def family(
            kind: type[CounterMetricFamily | GaugeMetricFamily],
            name: str,
            doc: str,
            labels: list[str],
            samples: Iterable[tuple[tuple[str, ...], float]],
        ) -> Metric:
            metric = kind(name, doc, labels=labels)
            for values, value in samples:
                metric.add_metric(list(values), value)
            return metric

        yield family(
            CounterMetricFamily,
            "changestream_commits",
            "Transactions committed through the server.",
            ["database"],
            (((d,), n) for d, n in sorted(commits.items())),
        )
        yield family(
            CounterMetricFamily,
            "changestream_rows_written",
            "Rows written by mutations and DML of committed transactions.",
            ["database"],
            (((d,), n) for d, n in sorted(rows.items())),
        )
        yield family(
            CounterMetricFamily,
            "changestream_records_read",
            "Change records and result rows sent to clients, by type.",
            ["database", "type"],
            sorted(records.items()),
        )
        yield family(
            GaugeMetricFamily,
            "changestream_open_streams",
            "Streaming responses in flight.",
            ["database"],
            (((d,), n) for d, n in sorted(open_streams.items())),
        )
        yield family(
            GaugeMetricFamily,
            "changestream_partitions",
            "Live partitions of each change stream.",
            ["database", "stream"],
            (((d, s), n) for d, s, n in self._partitions),
        )
        yield family(
            GaugeMetricFamily,
            "changestream_stream_lag_seconds",
            "Largest time between now and how far an open read of the stream has got.",
            ["database", "stream"],
            sorted(lag.items()),
        )
        yield family(
            CounterMetricFamily,
            "changestream_requests",
            "HTTP requests answered, by route and status.",
            ["route", "status"],
            (((r, str(s)), n) for (r, s), n in sorted(requests.items())),
        )
