"""SIGTERM to a server under load: every acknowledged commit is in the file, streams end
cleanly with a shutdown line, and transactions are all or nothing."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import httpx
import orjson

import changestream
from changestream.errors import ChangeStreamError
from tests.server_support import WAIT_S, free_port, spawn_server

DDL = [
    "CREATE TABLE T (Writer INT64 NOT NULL, Seq INT64 NOT NULL, Row INT64 NOT NULL) "
    "PRIMARY KEY (Writer, Seq, Row)",
    "CREATE CHANGE STREAM S FOR T",
]
ROWS = 10
WRITERS = 4


def test_sigterm_mid_load_loses_no_acknowledged_commit(tmp_path: Path) -> None:
    path = str(tmp_path / "load.db")
    with changestream.open(path) as db:
        created = db.execute_ddl(DDL)
        (partition,) = db.partitions("S")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = spawn_server(path, port, "--insecure-no-auth", "--keepalive", "0.2")
    acknowledged: list[tuple[int, int]] = []
    stop = threading.Event()

    def writer(number: int) -> None:
        remote = changestream.connect(f"{url}/load", reconnect_timeout=0.5)
        seq = 0
        while not stop.is_set():
            try:
                rows = [[number, seq, r] for r in range(ROWS)]
                with remote.transaction() as tx:
                    tx.insert("T", ["Writer", "Seq", "Row"], rows)
            except ChangeStreamError:
                return  # the server is going away: whether this one committed is unknown
            acknowledged.append((number, seq))
            seq += 1
        remote.close()

    stream_lines: list[dict[str, object]] = []

    def reader() -> None:
        body = {"stream": "S", "start_timestamp": created, "partition_token": partition.token}
        with httpx.stream(
            "POST", f"{url}/v1/databases/load/read_change_stream", json=body, timeout=WAIT_S
        ) as response:
            for line in response.iter_lines():
                stream_lines.append(orjson.loads(line))

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(WRITERS)]
    threads.append(threading.Thread(target=reader))
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + WAIT_S
    while len(acknowledged) < 40 and time.monotonic() < deadline:
        time.sleep(0.02)
    server.send_signal(signal.SIGTERM)
    try:
        exit_code = server.wait(WAIT_S)
    finally:
        stop.set()
        for thread in threads:
            thread.join(WAIT_S)
        if server.poll() is None:
            server.kill()
    assert server.stderr is not None
    stderr = server.stderr.read().decode()
    assert "WARNING: --insecure-no-auth" in stderr
    # A graceful stop: shutdown ran to the end, then (as uvicorn does) the process ends by the
    # signal it was sent; a crash would exit 1, a hang would need the kill above.
    assert exit_code == -signal.SIGTERM, stderr
    assert "Application shutdown complete" in stderr and "Traceback" not in stderr
    assert len(acknowledged) >= 40
    # The live stream ended cleanly and said why.
    assert stream_lines and stream_lines[-1] == {"type": "shutdown"}
    with changestream.open(path) as db:
        rows = db.read("T")
    by_transaction: dict[tuple[int, int], int] = {}
    for writer_number, seq, _ in rows:
        by_transaction[(writer_number, seq)] = by_transaction.get((writer_number, seq), 0) + 1
    assert set(acknowledged) <= set(by_transaction)
    assert set(by_transaction.values()) == {ROWS}
