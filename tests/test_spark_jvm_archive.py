"""The driver JVM's class archive: `changestream pipeline prepare` builds it with a real
spark-submit run, and a session started afterwards maps it (checked against the JVM itself)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
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


LEGACY = "spark-0.0.1-0123456789abcdef.jsa"


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A cache directory holding an archive built by the CLI, as `make` builds it."""
    directory = tmp_path_factory.mktemp("cache")
    # An archive of an earlier version, which recorded nothing of what it was built for,
    # unread for longer than such an archive is kept.
    (directory / LEGACY).write_bytes(b"classes")
    unread = time.time() - (jvm_archive.LEGACY_UNREAD_DAYS * 86_400 + 60)
    os.utime(directory / LEGACY, (unread, unread))
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
        assert f"removed {directory / LEGACY}: it does not say what it" in done.stdout
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
    origin = json.loads(archive.with_suffix(".origin.json").read_text())
    assert origin == {
        "spark_home": str(jvm_archive.spark_home().resolve()),
        "java": str(jvm_archive.java_binary()),
    }
    assert not (cache / LEGACY).exists()
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


def test_prune_removes_the_archives_no_installation_can_map(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    monkeypatch.setenv("CHANGESTREAM_CACHE_DIR", str(cache))
    java = jvm_archive.java_binary()
    keep = jvm_archive.archive_file()

    def archive(name: str, spark: Path | None, java_path: Path = java) -> Path:
        path = cache / name
        path.write_bytes(b"classes")
        if spark is not None:
            origin = {"spark_home": str(spark), "java": str(java_path)}
            path.with_suffix(".origin.json").write_text(json.dumps(origin))
        return path

    def fitting(spark: Path, java_path: Path = java) -> str:
        return f"spark-4.3.0-{jvm_archive._digest(spark, java_path)}.jsa"

    keep.write_bytes(b"classes")
    other_home = tmp_path / "other-spark"
    other_home.mkdir()
    alive = archive(fitting(other_home), other_home)
    gone_home = tmp_path / "gone-spark"
    gone_home.mkdir()
    gone = archive(fitting(gone_home), gone_home)
    gone_home.rmdir()
    legacy = archive("spark-4.2.0-0123456789abcdef.jsa", None)
    unread = time.time() - (jvm_archive.LEGACY_UNREAD_DAYS * 86_400 + 60)
    os.utime(legacy, (unread, unread))
    # Read lately: an installation of the earlier version may still map it.
    legacy_in_use = archive("spark-4.2.0-fedcba9876543210.jsa", None)
    os.utime(legacy_in_use, (time.time() - 3_600, unread))
    here = jvm_archive.spark_home().resolve()
    older_version = archive(fitting(here).replace("4.3.0", "4.2.0"), here)
    other_java = tmp_path / "java"
    other_java.write_bytes(b"a java")
    changed_java = archive(fitting(other_home, other_java), other_home, other_java)
    other_java.write_bytes(b"another java, upgraded in place")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    dead_partial = cache / f".{keep.name}.{dead.pid}.partial"
    live_partial = cache / f".{keep.name}.{os.getpid()}.partial"
    for partial in (dead_partial, live_partial):
        partial.write_bytes(b"half")

    removed = jvm_archive.prune_archives(keep)

    assert removed == {
        gone: f"the Spark installation {gone_home} or the Java {java} is gone or changed",
        legacy: (
            "it does not say what it was built for (an earlier version made it) and was not "
            f"read for {jvm_archive.LEGACY_UNREAD_DAYS} days"
        ),
        older_version: "this installation's archive for another Spark version",
        changed_java: (
            f"the Spark installation {other_home} or the Java {other_java} is gone or changed"
        ),
    }
    assert keep.exists() and alive.exists() and alive.with_suffix(".origin.json").exists()
    assert legacy_in_use.exists()
    for path in removed:
        assert not path.exists() and not path.with_suffix(".origin.json").exists()
    assert not dead_partial.exists() and live_partial.exists()
