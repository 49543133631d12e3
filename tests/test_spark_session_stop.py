"""Stopping the pipeline's Spark context: it stops at once and PySpark's accumulator
server, stopped in the background, is gone shortly after (no thread or socket left behind),
and so is the Python daemon its zygote forked.
In a process of its own: this one's tests share a session."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from tests.spark_support import run_script

SCRIPT = """
import socket, sys, threading, time
from changestream.spark import local_session
from changestream.spark._query_control import stop_context
from changestream.spark._session import local_context
context = local_context("local[1]", log=sys.argv[1])
assert context.parallelize(range(10), 2).count() == 10
server = context._accumulatorServer
address = server.server_address
stop_context(context)
assert context._jsc is None, "the context is stopped"
deadline = time.monotonic() + 30
while any(t.name == "spark-accumulators-stop" for t in threading.enumerate()):
    assert time.monotonic() < deadline, "the accumulator server did not stop"
    time.sleep(0.05)
assert server.fileno() == -1, "its socket is closed"
import os
def daemons():
    mine = f"zygote-{os.getpid()}-".encode()
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if mine in open(f"/proc/{pid}/cmdline", "rb").read():
                found.append(pid)
        except OSError:
            pass
    return found
while daemons():
    assert time.monotonic() < deadline, f"the zygote's daemon outlived the context: {daemons()}"
    time.sleep(0.05)
if isinstance(address, tuple):
    try:
        socket.create_connection(address, timeout=5).close()
    except OSError:
        pass
    else:
        raise AssertionError("something still listens on the accumulator server's port")
again = local_session("local[1]", log=sys.argv[1])
assert again.range(5).count() == 5, "a new session starts after it"
assert again.conf.get("spark.sql.session.timeZone") == "UTC"
stop_context(again.sparkContext)
print("ok")
"""


def test_stopping_the_session_leaves_no_accumulator_server(tmp_path: Path) -> None:
    assert run_script(SCRIPT, str(tmp_path / "spark.log")).strip().endswith("ok")
