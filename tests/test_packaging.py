"""Packaging: the wheel builds without deprecation warnings, and an install without extras
runs every command or says which extra it needs (issue 17, items 11 and 12)."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

from changestream.extras import MODULES

ROOT = Path(__file__).resolve().parent.parent


def test_the_wheel_builds_without_warnings(tmp_path: Path) -> None:
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    output = built.stdout + built.stderr
    assert "project.license" not in output and "Deprecat" not in output, output[-2000:]
    (wheel,) = tmp_path.glob("changestream-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        metadata = next(n for n in archive.namelist() if n.endswith("METADATA"))
        text = archive.read(metadata).decode()
        assert "changestream/py.typed" in archive.namelist()
    assert "License-Expression: Apache-2.0" in text


#: What an install with no extras lacks (the extras' packages and what they pull in).
NOT_INSTALLED = sorted(set().union(*MODULES.values()) | {"jsonschema_rs", "schemathesis"})
WITHOUT_EXTRAS = ROOT / "tests" / "without_extras"


def without_extras(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m changestream ARGS`` as it runs installed with no extras: importing any
    module of an extra fails as if it were not installed (tests/without_extras)."""
    env = {
        **os.environ,
        "PYTHONPATH": str(WITHOUT_EXTRAS),
        "CHANGESTREAM_HIDDEN_MODULES": ",".join(NOT_INSTALLED),
        "CHANGESTREAM_TOKEN": "cs_unused",
    }
    return subprocess.run(
        [sys.executable, "-m", "changestream", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_without_extras_each_command_works_or_names_its_extra(tmp_path: Path) -> None:
    probe = without_extras(tmp_path, "sql", ":memory:", "SELECT 1")
    assert probe.returncode == 0, probe.stderr
    hidden = subprocess.run(
        [sys.executable, "-c", "import httpx"],
        env={
            **os.environ,
            "PYTHONPATH": str(WITHOUT_EXTRAS),
            "CHANGESTREAM_HIDDEN_MODULES": ",".join(NOT_INSTALLED),
        },
        capture_output=True,
        text=True,
        check=False,
    )
    assert "No module named 'httpx'" in hidden.stderr  # the simulation holds
    table = "CREATE TABLE T (K INT64 NOT NULL, V STRING(MAX)) PRIMARY KEY (K)"
    stream = "CREATE CHANGE STREAM S FOR ALL OPTIONS (value_capture_type = 'NEW_ROW')"
    works = [
        ("ddl", "x.db", table, stream),
        ("sql", "x.db", "SELECT * FROM T"),
        ("partitions", "x.db", "S"),
        ("leases", "x.db", "S", "--once"),
        ("policy", "x.db"),
        ("discover", "x.db"),
        (
            "streams",
            "create",
            "s",
            "--db",
            "x.db",
            "--change-stream",
            "S",
            "--destination",
            "out",
        ),
        ("streams", "start", "s", "--db", "x.db"),
        ("streams", "list", "--db", "x.db"),
        ("token", "create", "--tokens", "tokens.jsonl", "--scope", "read"),
        ("demo", "--path", "demo.db", "--tail-seconds", "0.5"),
    ]
    for args in works:
        ran = without_extras(tmp_path, *args)
        assert ran.returncode == 0, (args, ran.stdout[-500:], ran.stderr[-2000:])
        assert "Traceback" not in ran.stderr, (args, ran.stderr)
    needs_extra = [
        (("serve", "x.db", "--tokens", "tokens.jsonl"), "server"),
        (("sql", "http://127.0.0.1:9/x", "SELECT 1"), "client"),
        (("streams", "list", "--db", "http://127.0.0.1:9/x"), "client"),
        (("pipeline", "run", "s", "--db", "x.db"), "spark"),
        (("demo", "--pipeline", "1"), "spark"),
    ]
    for args, extra in needs_extra:
        ran = without_extras(tmp_path, *args)
        assert ran.returncode == 2, (args, ran.stdout[-500:], ran.stderr[-2000:])
        assert "Traceback" not in ran.stderr, (args, ran.stderr)
        assert f"needs the {extra} extra" in ran.stderr, (args, ran.stderr)
        assert f"pip install 'changestream[{extra}]'" in ran.stderr, (args, ran.stderr)
