"""Every benchmark at a tiny size checks its own counts, and fails on a broken build.

The smoke runs (``make bench-smoke``, part of ``make test``) run each benchmark as a user would,
in a subprocess, and need exit status 0 and one JSON line with its goals. The fault runs put
``tests/faults`` on ``PYTHONPATH`` with ``CHANGESTREAM_FAULT=drop-every-10th`` (every change
stream read drops every tenth data change record) and need the benchmark to fail its checks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SRC = str(ROOT / "src")
FAULTS = str(ROOT / "tests" / "faults")

#: Each benchmark with its tiny-size arguments.
SMOKE = {
    "write_path": ["--transactions", "20", "--repeats", "1"],
    "read_path": ["--mods", "2000", "--repeats", "1"],
    "tail_latency": ["--seconds", "0.5"],
    "partition_scale": ["--transactions", "10", "--partitions", "1,10"],
    "watch": ["--transactions", "20", "--repeats", "1", "--commits", "20", "--pace-ms", "2"],
    "stream_client": ["--transactions", "100", "--stall", "15", "--repeats", "2"],
    "server": ["--transactions", "10", "--small", "50", "--latency-commits", "10"],
    "spark_read": ["--mods", "2000", "--partitions", "2", "--repeats", "1", "--skip-streaming"],
    # spark_read's streaming part alone: a live query and a writer, checked key by key.
    "spark_read_streaming": ["--partitions", "2", "--skip-batch", "--seconds", "2", "--rate", "20"],
    "pipeline": ["--smoke"],
    "schema_change": ["--smoke"],
    "console": ["--partitions", "50", "--leases", "10", "--transactions", "20", "--requests", "20"],
    "sources": [
        *("--write-transactions", "5", "--backlog-changes", "2000"),
        *("--steady-transactions", "5", "--latency-seconds", "1", "--idle-seconds", "1"),
    ],
    "sources_mysql": [
        *("--source", "mysql", "--write-transactions", "5", "--backlog-changes", "2000"),
        *("--steady-transactions", "5", "--latency-seconds", "1", "--idle-seconds", "1"),
    ],
}


#: Where the fault goes: spark_read's and pipeline's in-process baselines would fail first, so
#: only the processes they start (the pipeline, the JVM and its Python workers) drop records.
FAULT = {
    "spark_read": "drop-every-10th-in-children",
    "spark_read_streaming": "drop-every-10th-in-children",
    "pipeline": "drop-every-10th-in-children",
}
SPARK = ("spark_read", "spark_read_streaming", "pipeline")
#: Benchmarks run as a part of another's script.
SCRIPTS = {"spark_read_streaming": "spark_read", "sources_mysql": "sources"}


def run(name: str, fault: bool) -> subprocess.CompletedProcess[str]:
    """Runs benchmark ``name`` at its smoke size, with the fault injected or not."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHANGESTREAM_FAULT")}
    env["PYTHONPATH"] = os.pathsep.join([FAULTS, SRC] if fault else [SRC])
    if fault:
        env["CHANGESTREAM_FAULT"] = FAULT.get(name, "drop-every-10th")
    script = str(ROOT / "benchmarks" / f"{SCRIPTS.get(name, name)}.py")
    return subprocess.run(
        [sys.executable, script, *SMOKE[name]],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )


PARAMS = [
    pytest.param(name, marks=[pytest.mark.spark] if name in SPARK else [], id=name)
    for name in SMOKE
]


@pytest.mark.bench_smoke
@pytest.mark.parametrize("name", PARAMS)
def test_benchmark_runs_and_checks_its_counts(name: str) -> None:
    done = run(name, fault=False)
    assert done.returncode == 0, done.stderr[-3000:]
    (line,) = done.stdout.strip().splitlines()
    result = json.loads(line)
    assert result["benchmark"] == SCRIPTS.get(name, name)
    assert isinstance(result["goals"], list)
    for entry in result["goals"]:
        assert entry["met"] in (True, False) and entry["goal"] and entry["from"]
        assert f"{entry['figure']} = {entry['value']}" in done.stderr


@pytest.mark.bench_smoke
@pytest.mark.parametrize("name", PARAMS)
def test_benchmark_fails_when_the_source_drops_every_tenth_record(name: str) -> None:
    done = run(name, fault=True)
    assert done.returncode != 0
    assert "check failed" in done.stderr, done.stderr[-3000:]
    if name == "spark_read":
        assert "check failed: spark count" in done.stderr, done.stderr[-3000:]
    assert done.stdout.strip() == ""
