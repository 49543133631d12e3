"""The driver JVM's class archive: `changestream pipeline prepare` builds it with a real
spark-submit run, and a session started afterwards maps it (checked against the JVM itself)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

from changestream import FailedPrecondition
from changestream.spark import jvm_archive

SESSION_SCRIPT = """
import json, sys
from changestream.spark import local_session
spark = local_session("local[1]", log=sys.argv[1])
jvm = spark.sparkContext._jvm
print(json.dumps({
    "args": list(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments()),
    "classpath": jvm.System.getProperty("java.class.path"),
    "count": spark.range(5).count(),
}))
spark.stop()
"""


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A cache directory holding an archive built by the CLI, as `make` builds it."""
    directory = tmp_path_factory.mktemp("cache")
    saved = os.environ.get("CHANGESTREAM_CACHE_DIR")
    os.environ["CHANGESTREAM_CACHE_DIR"] = str(directory)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "changestream", "pipeline", "prepare"],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert "built" in done.stdout
        yield directory
    finally:
        if saved is None:
            os.environ.pop("CHANGESTREAM_CACHE_DIR", None)
        else:
            os.environ["CHANGESTREAM_CACHE_DIR"] = saved


def start_session(tmp: Path, cache: Path) -> dict[str, Any]:
    """Start a driver JVM the way pipelines do, in a process of its own (this one's JVM is
    already running); what that JVM says about itself."""
    env = {**os.environ, "CHANGESTREAM_CACHE_DIR": str(cache)}
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    done = subprocess.run(
        [sys.executable, "-c", SESSION_SCRIPT, str(tmp / "spark.log")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    info: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert info["count"] == 5
    return info


def maps_on(archive: Path, classpath: str) -> subprocess.CompletedProcess[str]:
    """``java -Xshare:on``: the JVM refuses to start unless it can map ``archive`` for a
    process with ``classpath``."""
    return subprocess.run(
        [
            str(jvm_archive.java_binary()),
            "-Xshare:on",
            f"-XX:SharedArchiveFile={archive}",
            "-cp",
            classpath,
            "-version",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_prepare_builds_an_archive_sessions_then_map(cache: Path, tmp_path: Path) -> None:
    archive = jvm_archive.archive_file()
    assert archive.parent == cache and archive.is_file()
    assert archive.stat().st_size > 10 * 2**20  # the classes of a whole Spark job
    assert not list(cache.glob(".*partial"))  # the temporary name is gone
    info = start_session(tmp_path, cache)
    assert f"-XX:SharedArchiveFile={archive}" in info["args"]
    assert "-XX:TieredStopAtLevel=1" in info["args"]  # DRIVER_JAVA_OPTIONS, beside it
    mapped = maps_on(archive, info["classpath"])
    assert mapped.returncode == 0, mapped.stdout + mapped.stderr


def test_a_damaged_archive_costs_only_the_head_start(cache: Path, tmp_path: Path) -> None:
    damaged = tmp_path / "cache"
    damaged.mkdir()
    name = jvm_archive.archive_file().name
    (damaged / name).write_bytes(os.urandom(1 << 20))
    info = start_session(tmp_path, damaged)  # the session starts and runs a job all the same
    assert f"-XX:SharedArchiveFile={damaged / name}" in info["args"]
    refused = maps_on(damaged / name, info["classpath"])
    assert refused.returncode != 0  # the check above can fail: this archive is not mapped


def test_no_archive_no_option(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHANGESTREAM_CACHE_DIR", str(tmp_path / "empty"))
    assert jvm_archive.driver_java_options() is None
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-java"))
    with pytest.raises(FailedPrecondition, match="no Java found"):
        jvm_archive.java_binary()
    assert jvm_archive.driver_java_options() is None


def test_user_java_options_win(monkeypatch: pytest.MonkeyPatch) -> None:
    from changestream.spark._session import _driver_java_options_given

    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", '--driver-java-options "-Xmx2g" pyspark-shell')
    assert _driver_java_options_given()
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", "--conf spark.eventLog.enabled=true pyspark-shell")
    assert not _driver_java_options_given()


def test_prepare_says_when_the_cache_cannot_be_written(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    env = {**os.environ, "CHANGESTREAM_CACHE_DIR": str(blocker / "cache")}
    done = subprocess.run(
        [sys.executable, "-m", "changestream", "pipeline", "prepare"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 2
    assert "error: cannot create the cache directory" in done.stderr
    assert "CHANGESTREAM_CACHE_DIR" in done.stderr and "Traceback" not in done.stderr
