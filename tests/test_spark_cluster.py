"""The pipeline on a real Spark standalone cluster: a master and two workers started from
PySpark's own distribution on 127.0.0.1, the source served over HTTP by `changestream serve`,
and `changestream pipeline run --master spark://...` in its own process."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

import pyspark

import changestream
from changestream.datastream import StreamCatalog, StreamDefinition
from changestream.datastream.files import event_files, read_events
from changestream.spark.replica import DeltaReplica
from tests.server_support import WAIT_S as SERVER_WAIT_S
from tests.server_support import free_port, spawn_server
from tests.spark_support import ITEMS, write_items

pytestmark = pytest.mark.spark

ALL = (
    "CREATE CHANGE STREAM Everything FOR ALL "
    "OPTIONS (value_capture_type = 'NEW_ROW_AND_OLD_VALUES')"
)
#: Bounded waits: a cluster that does not come up fails the test instead of hanging it.
WAIT_S = 90.0


def _spark_class(*args: str, log: Path) -> subprocess.Popen[bytes]:
    home = Path(pyspark.__file__).parent
    env = {
        **os.environ,
        "SPARK_HOME": str(home),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
    }
    with open(log, "wb") as out:
        return subprocess.Popen(
            [str(home / "bin" / "spark-class"), *args],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _wait_for(log: Path, text: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if text in log.read_text(errors="replace"):
            return
        assert process.poll() is None, log.read_text(errors="replace")[-2000:]
        time.sleep(0.2)
    raise AssertionError(f"{text!r} not in {log} within {WAIT_S}s")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``spark://127.0.0.1:PORT`` of a master with two one-core workers."""
    work = tmp_path_factory.mktemp("cluster")
    port = free_port()
    processes = []
    try:
        master = _spark_class(
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--webui-port",
            str(free_port()),
            log=work / "master.log",
        )
        processes.append(master)
        _wait_for(work / "master.log", "I have been elected leader", master)
        url = f"spark://127.0.0.1:{port}"
        for n in range(2):
            worker = _spark_class(
                "org.apache.spark.deploy.worker.Worker",
                url,
                "--host",
                "127.0.0.1",
                "--cores",
                "1",
                "--memory",
                "2g",
                "--webui-port",
                str(free_port()),
                "--work-dir",
                str(work / f"worker{n}"),
                log=work / f"worker{n}.log",
            )
            processes.append(worker)
            _wait_for(work / f"worker{n}.log", "Successfully registered with master", worker)
        yield url
    finally:
        # SIGTERM: Spark's shutdown hooks remove the daemons' temporary directories.
        for process in processes:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        for process in processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(30)


def test_pipeline_on_a_standalone_cluster_reading_a_served_source(
    cluster: str, tmp_path: Path
) -> None:
    served = tmp_path / "served"
    served.mkdir()
    path = str(served / "shop.db")
    with changestream.open(path) as db:
        db.execute_ddl([ITEMS, ALL])
        with db.transaction() as tx:
            tx.insert("Items", ["Id", "Name", "Qty"], [[i, f"i{i}", i] for i in range(200)])
    tokens = tmp_path / "tokens"
    create = [sys.executable, "-m", "changestream", "token", "create", "--tokens", str(tokens)]
    token = subprocess.run(
        [*create, "--scope", "read,write"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    port = free_port()
    server = spawn_server(str(served), port, "--tokens", str(tokens))
    try:
        url = f"http://127.0.0.1:{port}/shop"
        definition = StreamDefinition(
            name="orders",
            database=url,
            change_stream="Everything",
            destination=str(tmp_path / "events"),
            replica=str(tmp_path / "replica"),
        )
        with changestream.connect(url, token=token) as remote:
            StreamCatalog(remote).create(definition)
            StreamCatalog(remote).transition("orders", "start")
        with changestream.open(path) as db:  # CDC after `streams start`, with splits
            write_items(db, seed=31, transactions=40)
        command = [sys.executable, "-m", "changestream", "--token", token, "pipeline", "run"]
        command += ["orders", "--db", url, "--master", cluster, "--until-caught-up"]
        env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
        finished = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
        assert finished.returncode == 0, finished.stderr[-3000:]
        with changestream.connect(url, token=token) as remote:
            (table,) = remote.tables()
            source = remote.read("Items")
            progress = StreamCatalog(remote).progress("orders")
    finally:
        server.terminate()
        server.wait(SERVER_WAIT_S)
    replica = DeltaReplica(tmp_path / "replica", "shop", table).read_rows()
    assert replica == source
    events = [e for f in event_files(tmp_path / "events") for e in read_events(f)]
    backfill = [e for e in events if e["read_method"] == "changestream-backfill"]
    # Every row of the snapshot once (the writer deleted a few before the backfill read).
    assert 150 < len({e["payload"]["Id"] for e in backfill}) == len(backfill) <= 200
    cdc = [e for e in events if e["read_method"] == "changestream-cdc"]
    assert len(cdc) >= 40 * 5 and len({e["uuid"] for e in cdc}) == len(cdc)
    assert progress.rows_processed == len(events)
