"""A remote read stream broken mid-read carries on exactly: no record lost, none repeated."""

from __future__ import annotations

import threading
from pathlib import Path

import changestream
from changestream import DataChangeRecord, HeartbeatRecord
from changestream.clock import parse_ts
from tests.server_support import Proxy, free_port, serving

DDL = [
    "CREATE TABLE A (K INT64 NOT NULL, V STRING(MAX)) PRIMARY KEY (K)",
    "CREATE TABLE B (K INT64 NOT NULL, V STRING(MAX)) PRIMARY KEY (K)",
    "CREATE CHANGE STREAM S FOR ALL",
]


def write(db: changestream.EmbeddedDatabase, first: int, count: int) -> int:
    """``count`` transactions, each writing both tables: two records per transaction, so a
    cut can fall between the records of one transaction. Returns the last commit time."""
    for i in range(first, first + count):
        with db.transaction() as tx:
            tx.insert("A", ["K", "V"], [[i, "a" * (i % 50)]])
            tx.insert("B", ["K", "V"], [[i, "b"], [-i - 1, "c"]])
    assert tx.commit_timestamp is not None
    return parse_ts(tx.commit_timestamp)


def test_cut_connections_resume_exactly(tmp_path: Path) -> None:
    with changestream.open(str(tmp_path / "cut.db")) as db:
        created = db.execute_ddl(DDL)
        end = write(db, 0, 150)
        (partition,) = db.partitions("S")
        expected = list(db.read_change_stream("S", created, end, partition.token, 1000))
        assert len(expected) == 300
        with serving({"cut": db}) as running:
            # Every connection dies after 16 KiB: mid-line, mid-chunk, mid-transaction.
            proxy = Proxy(running.server.port, cut_after=16 << 10)
            remote = changestream.connect(f"http://127.0.0.1:{proxy.port}/cut")
            got = list(remote.read_change_stream("S", created, end, partition.token, 1000))
            assert got == expected
            assert proxy.connections > 5  # the stream did break, many times
            remote.close()
            proxy.close()


def test_live_tail_survives_a_server_restart(tmp_path: Path) -> None:
    port = free_port()
    with changestream.open(str(tmp_path / "restart.db")) as db:
        created = db.execute_ddl(DDL)
        (partition,) = db.partitions("S")
        first = serving({"restart": db}, port=port, keepalive_seconds=0.5)
        running = first.__enter__()
        remote = changestream.connect(f"http://127.0.0.1:{port}/restart")
        reader = remote.read_change_stream("S", created, None, partition.token, 1000)
        last = write(db, 0, 20)
        got = []
        for record in reader:
            got.append(record)
            if len(got) == 15:
                # Stop the server mid-stream (its streams end with a shutdown line), write
                # while it is down, and start a new one on the same port.
                first.__exit__(None, None, None)
                last = write(db, 20, 20)
                second = serving({"restart": db}, port=port)
                running = second.__enter__()
            if isinstance(record, HeartbeatRecord) and record.timestamp >= last:
                break
        second.__exit__(None, None, None)
        expected = list(db.read_change_stream("S", created, last, partition.token, 1000))
        data = [r for r in got if isinstance(r, DataChangeRecord)]
        assert data == expected
        assert len(data) == 80
        assert running.url.endswith(str(port))
        remote.close()


def test_abandoned_stream_is_released(tmp_path: Path) -> None:
    """A client that stops reading a live stream frees its server thread and stream slot."""
    with changestream.open(str(tmp_path / "drop.db")) as db:
        created = db.execute_ddl(DDL)
        (partition,) = db.partitions("S")
        with serving({"drop": db}, keepalive_seconds=0.2) as running:
            state = running.server.config.app.state.server
            remote = changestream.connect(running.url + "/drop")
            reader = remote.read_change_stream("S", created, None, partition.token, 1000)
            write(db, 0, 1)
            next(reader)
            assert len(state.streams) == 1
            reader.close()  # type: ignore[attr-defined]
            done = threading.Event()

            def wait_until_released() -> None:
                while state.streams:
                    done.wait(0.05)
                done.set()

            waiter = threading.Thread(target=wait_until_released, daemon=True)
            waiter.start()
            assert done.wait(10), "the server kept the abandoned stream"
            remote.close()
