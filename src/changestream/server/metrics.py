"""Server metrics in the Prometheus text exposition format (version 0.0.4)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from changestream.clock import now_us


@dataclass(slots=True)
class OpenStream:
    """One streaming response in flight: its database, what it has sent, and how far it is."""

    database: str
    stream: str
    #: Timestamp (microseconds) through which the client has been sent everything; 0 if unknown.
    position: int = 0
    records: Counter[str] = field(default_factory=Counter)


class Metrics:
    """Counters and gauges of one server, safe to update from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._commits: Counter[str] = Counter()
        self._rows: Counter[str] = Counter()
        self._requests: Counter[tuple[str, int]] = Counter()
        self._records: Counter[tuple[str, str]] = Counter()
        self._streams: dict[int, OpenStream] = {}

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

    def render(self, partitions: Iterable[tuple[str, str, int]]) -> str:
        """The text format; ``partitions`` gives (database, stream, live partitions)."""
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
        out: list[str] = []

        def family(name: str, kind: str, doc: str, samples: Iterable[tuple[str, float]]) -> None:
            out.append(f"# HELP {name} {doc}")
            out.append(f"# TYPE {name} {kind}")
            out.extend(f"{name}{labels} {value:g}" for labels, value in samples)

        family(
            "changestream_commits_total",
            "counter",
            "Transactions committed through the server.",
            ((_labels(database=d), n) for d, n in sorted(commits.items())),
        )
        family(
            "changestream_rows_written_total",
            "counter",
            "Rows written by mutations and DML of committed transactions.",
            ((_labels(database=d), n) for d, n in sorted(rows.items())),
        )
        family(
            "changestream_records_read_total",
            "counter",
            "Change records and result rows sent to clients, by type.",
            ((_labels(database=d, type=t), n) for (d, t), n in sorted(records.items())),
        )
        family(
            "changestream_open_streams",
            "gauge",
            "Streaming responses in flight.",
            ((_labels(database=d), n) for d, n in sorted(open_streams.items())),
        )
        family(
            "changestream_partitions",
            "gauge",
            "Live partitions of each change stream.",
            ((_labels(database=d, stream=s), n) for d, s, n in sorted(partitions)),
        )
        family(
            "changestream_stream_lag_seconds",
            "gauge",
            "Largest time between now and how far an open read of the stream has got.",
            ((_labels(database=d, stream=s), v) for (d, s), v in sorted(lag.items())),
        )
        family(
            "changestream_requests_total",
            "counter",
            "HTTP requests answered, by route and status.",
            ((_labels(route=r, status=str(s)), n) for (r, s), n in sorted(requests.items())),
        )
        return "\n".join(out) + "\n"


def _labels(**labels: str) -> str:
    def escape(text: str) -> str:
        return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    return "{" + ",".join(f'{k}="{escape(v)}"' for k, v in labels.items()) + "}"
