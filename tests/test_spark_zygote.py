"""Spark's Python daemon preloaded by a zygote while the JVM starts: the process the JVM
starts hands its role over, the daemon serves as pyspark's would, a SIGTERM reaches it, and
without a zygote the process runs the daemon itself (real processes, a real daemon, the
JVM's side of its protocol played by the test)."""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from changestream.spark import zygote
from changestream.spark.zygote import SOCKET_VARIABLE, ZYGOTE_FLAG

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the hand-over passes file descriptors"
)


def _daemon(env: dict[str, str]) -> subprocess.Popen[bytes]:
    """The daemon as the JVM starts it: its port comes on stdout, stdin closing stops it."""
    daemon_env = {
        **{k: v for k, v in os.environ.items() if k != SOCKET_VARIABLE},
        "PYTHON_UNIX_DOMAIN_ENABLED": "false",
        "PYTHON_WORKER_FACTORY_SECRET": "secret",
        **env,
    }
    return subprocess.Popen(
        [sys.executable, "-m", "changestream.spark._daemon"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=daemon_env,
    )


def _port(daemon: subprocess.Popen[bytes]) -> int:
    assert daemon.stdout is not None
    raw = daemon.stdout.read(4)
    assert len(raw) == 4, daemon.stderr.read() if daemon.stderr else raw
    return int(struct.unpack("!i", raw)[0])


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    except OSError:
        return False
    return True


def _owner_cmdline(port: int) -> str:
    """The command line of the process listening on ``port`` (from /proc)."""
    inodes = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if int(fields[1].split(":")[1], 16) == port and fields[3] == "0A":
            inodes.add(fields[9])
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            links = {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
        except OSError:
            continue
        if any(f"socket:[{inode}]" in links for inode in inodes):
            return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    raise AssertionError(f"nothing listens on port {port}")


def test_the_started_process_hands_the_daemon_to_the_zygote_and_passes_sigterm_on(
    tmp_path: Path,
) -> None:
    assert zygote.start_zygote(tmp_path)
    started = zygote._zygote
    assert started is not None
    try:
        daemon = _daemon({SOCKET_VARIABLE: os.environ[SOCKET_VARIABLE]})
        port = _port(daemon)
        assert _listening(port)
        # The zygote's child serves the port: it keeps the zygote's command line.
        assert ZYGOTE_FLAG in _owner_cmdline(port)
        # A zygote serves one daemon, then exits.
        assert started.wait(timeout=30) == 0
        assert daemon.poll() is None, "the started process stays while its daemon runs"
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=30)
        deadline = time.monotonic() + 30
        while _listening(port):
            assert time.monotonic() < deadline, "the daemon outlived the SIGTERM"
            time.sleep(0.1)
    finally:
        zygote.stop_zygote()
    assert SOCKET_VARIABLE not in os.environ


def test_a_handed_over_daemon_ends_when_the_jvm_closes_its_stdin(tmp_path: Path) -> None:
    assert zygote.start_zygote(tmp_path)
    try:
        daemon = _daemon({SOCKET_VARIABLE: os.environ[SOCKET_VARIABLE]})
        port = _port(daemon)
        assert daemon.stdin is not None
        daemon.stdin.close()
        daemon.wait(timeout=30)
        assert not _listening(port)
    finally:
        zygote.stop_zygote()


def test_without_a_zygote_the_started_process_runs_the_daemon_itself(tmp_path: Path) -> None:
    daemon = _daemon({SOCKET_VARIABLE: str(tmp_path / "nobody.sock")})
    port = _port(daemon)
    assert _listening(port)
    assert ZYGOTE_FLAG not in _owner_cmdline(port)
    assert daemon.stdin is not None
    daemon.stdin.close()
    daemon.wait(timeout=30)  # pyspark's daemon ends with 1 when stdin closes
    assert not _listening(port)


def test_an_unused_zygote_ends_with_its_driver(tmp_path: Path) -> None:
    """Its lifeline is its driver's pipe: a driver killed with SIGKILL leaves no zygote."""
    driver = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, pathlib; from changestream.spark import zygote; "
            "zygote.start_zygote(pathlib.Path(sys.argv[1])); "
            "print(zygote._zygote.pid, flush=True); sys.stdin.read()",
            str(tmp_path),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert driver.stdout is not None
    pid = int(driver.stdout.readline())
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob("zygote-*.sock")):
        assert time.monotonic() < deadline, "the zygote never listened"
        time.sleep(0.05)
    driver.send_signal(signal.SIGKILL)
    driver.wait(timeout=30)
    while Path(f"/proc/{pid}").exists() and "Z" not in _state(pid):
        assert time.monotonic() < deadline, "the zygote outlived its driver"
        time.sleep(0.05)
    assert not list(tmp_path.glob("zygote-*.sock"))


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"
