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

_COUNTER, _GAUGE = CounterMetricFamily, GaugeMetricFamily
#: Each family the server exports: its kind, its labels and its help text.
_FAMILIES: dict[str, tuple[type[CounterMetricFamily | GaugeMetricFamily], tuple[str, ...], str]] = {
    "changestream_commits": (_COUNTER, ("database",), "Transactions committed through the server."),
    "changestream_rows_written": (
        _COUNTER,
        ("database",),
        "Rows written by mutations and DML of committed transactions.",
    ),
    "changestream_records_read": (
        _COUNTER,
        ("database", "type"),
        "Change records and result rows sent to clients, by type.",
    ),
    "changestream_open_streams": (_GAUGE, ("database",), "Streaming responses in flight."),
    "changestream_partitions": (
        _GAUGE,
        ("database", "stream"),
        "Live partitions of each change stream.",
    ),
    "changestream_stream_lag_seconds": (
        _GAUGE,
        ("database", "stream"),
        "Largest time between now and how far an open read of the stream has got.",
    ),
    "changestream_requests": (
        _COUNTER,
        ("route", "status"),
        "HTTP requests answered, by route and status.",
    ),
}


def _by_database(counts: dict[str, int]) -> Iterator[tuple[tuple[str, ...], float]]:
    return (((database,), n) for database, n in sorted(counts.items()))


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

    def open_reads(self, database: str) -> tuple[Counter[str], dict[str, float]]:
        """The open reads of ``database``'s change streams: how many per stream, and the
        largest lag (seconds from each read's position to now) per stream with a position."""
        with self._lock:
            streams = [e for e in self._streams.values() if e.database == database and e.stream]
        lags = _lags(streams, now_us())
        return Counter(e.stream for e in streams), {s: v for (_, s), v in lags.items()}

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
        lag = _lags(streams, now)

        samples: dict[str, Iterable[tuple[tuple[str, ...], float]]] = {
            "changestream_commits": _by_database(commits),
            "changestream_rows_written": _by_database(rows),
            "changestream_records_read": sorted(records.items()),
            "changestream_open_streams": _by_database(open_streams),
            "changestream_partitions": (((d, s), n) for d, s, n in self._partitions),
            "changestream_stream_lag_seconds": sorted(lag.items()),
            "changestream_requests": (((r, str(s)), n) for (r, s), n in sorted(requests.items())),
        }
        for name, values in samples.items():
            family, labels, doc = _FAMILIES[name]
            metric = family(name, doc, labels=list(labels))
            for label_values, value in values:
                metric.add_metric(list(label_values), value)
            yield metric


def _lags(streams: Iterable[OpenStream], now: int) -> dict[tuple[str, str], float]:
    """The largest lag of the open reads of each (database, stream) that have a position."""
    lag: dict[tuple[str, str], float] = {}
    for entry in streams:
        if entry.stream and entry.position:
            key = (entry.database, entry.stream)
            lag[key] = max(lag.get(key, 0.0), max(now - entry.position, 0) / 1e6)
    return lag
