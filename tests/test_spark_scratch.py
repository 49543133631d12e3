"""The Spark driver's scratch directory: Spark's local directories, the driver JVM's
temporary files and the workers' sockets in one directory per process, which the next
driver removes when its owner was killed (real processes, killed with SIGKILL)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from changestream.spark.scratch import LOCK, PREFIX, remove_abandoned

#: A process that makes its scratch directory, prints it, and waits for its stdin to close.
_OWNER = """
import sys
from changestream.spark.scratch import scratch_dir
path = scratch_dir()
(path / "local").mkdir()
(path / "local" / "blockmgr-1").write_text("x")
print(path, flush=True)
sys.stdin.read()
"""


def _owner(temp: Path) -> tuple[subprocess.Popen[str], Path]:
    process = subprocess.Popen(
        [sys.executable, "-c", _OWNER],
        env={**os.environ, "TMPDIR": str(temp)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    return process, Path(process.stdout.readline().strip())


def test_a_killed_owners_directory_is_removed_and_a_live_ones_is_kept(tmp_path: Path) -> None:
    killed, killed_dir = _owner(tmp_path)
    live, live_dir = _owner(tmp_path)
    # One being made by a third driver: no lock file yet.
    making = tmp_path / f"{PREFIX}making"
    (making / "local").mkdir(parents=True)
    assert killed_dir.parent == live_dir.parent == tmp_path
    assert killed_dir.name.startswith(PREFIX) and (killed_dir / LOCK).is_file()
    try:
        killed.send_signal(signal.SIGKILL)
        killed.wait(30)
        assert (killed_dir / "local" / "blockmgr-1").is_file()
        assert remove_abandoned(tmp_path) == [killed_dir]
        assert not killed_dir.exists()
        assert (live_dir / "local" / "blockmgr-1").is_file() and making.is_dir()
        assert remove_abandoned(tmp_path) == []
    finally:
        live.communicate(timeout=30)
    # A clean exit removes the owner's own directory.
    assert live.returncode == 0 and not live_dir.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [making.name]


def test_a_new_scratch_directory_first_removes_the_abandoned_ones(tmp_path: Path) -> None:
    killed, killed_dir = _owner(tmp_path)
    killed.send_signal(signal.SIGKILL)
    killed.wait(30)
    live, live_dir = _owner(tmp_path)
    try:
        assert not killed_dir.exists() and live_dir.is_dir()
        assert [p.name for p in tmp_path.iterdir()] == [live_dir.name]
    finally:
        live.communicate(timeout=30)


_CONF = """
from changestream.spark import _session
conf = _session.context_conf("local[2]", "app")
print(conf.get("spark.local.dir"))
print(conf.get("spark.driver.extraJavaOptions"))
"""


def _conf(tmp_path: Path, **env: str) -> list[str]:
    """The local directory and driver JVM options of a new context's configuration (in a
    process of its own: a JVM started before lends its settings to every new one)."""
    done = subprocess.run(
        [sys.executable, "-c", _CONF],
        env={**os.environ, "TMPDIR": str(tmp_path), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.splitlines()


def test_spark_local_and_jvm_temp_directories_are_in_the_scratch_directory(
    tmp_path: Path,
) -> None:
    local, options = _conf(tmp_path)
    local_dir = Path(local)
    assert local_dir.name == "local" and local_dir.parent.name.startswith(PREFIX)
    assert local_dir.parent.parent == tmp_path
    assert f"-Djava.io.tmpdir={local_dir.parent / 'jvm'}" in options.split()


def test_a_users_local_directory_and_java_options_win_over_the_scratch_directory(
    tmp_path: Path,
) -> None:
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "spark-defaults.conf").write_text(
        "spark.local.dir /big/disk\nspark.driver.extraJavaOptions -Xss4m\n"
    )
    assert _conf(tmp_path, SPARK_CONF_DIR=str(conf)) == ["None", "None"]
    local, options = _conf(tmp_path, SPARK_LOCAL_DIRS="/big/disk")
    assert local == "None" and "-Djava.io.tmpdir=" in options


_FORKS = """
import os, sys
from changestream.spark.scratch import scratch_dir
path = scratch_dir()
child = os.fork()
if child == 0:
    sys.exit(0)  # runs the exit handlers it inherited
os.waitpid(child, 0)
print(path.is_dir(), path, flush=True)
"""


def test_a_forked_child_leaves_its_parents_directory_alone(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _FORKS],
        env={**os.environ, "TMPDIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    alive, path = done.stdout.split()
    assert alive == "True" and Path(path).parent == tmp_path
    assert list(tmp_path.iterdir()) == []
