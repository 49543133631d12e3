"""`register(spark)` on a session whose Python workers cannot import changestream."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

pytestmark = pytest.mark.spark

SCRIPT = """
import sys
from pyspark.sql import SparkSession
from changestream.spark import register
spark = (
    SparkSession.builder.master("local[1]")
    .config("spark.ui.enabled", "false")
    .config("spark.pyspark.python", sys.argv[1])
    .getOrCreate()
)
register(spark)
try:
    spark.read.format("changestream").option("database", "x.db").option("stream", "S").load()
except Exception as exc:
    print("LOAD FAILED:", exc)
else:
    print("LOADED")
spark.stop()
"""


def test_workers_without_changestream_fail_at_load_with_a_message_saying_how_to_fix_it(
    tmp_path: Path,
) -> None:
    # The interpreter this virtual environment was made from: same Python, no changestream.
    base = Path(sys._base_executable)  # type: ignore[attr-defined]
    check = subprocess.run([str(base), "-c", "import changestream"], capture_output=True)
    if check.returncode == 0:
        pytest.skip(f"{base} can import changestream; no interpreter without it to point at")
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYTHONPATH")}
    finished = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(base)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
    )
    assert finished.returncode == 0, finished.stderr[-2000:]
    assert "LOAD FAILED:" in finished.stdout, finished.stdout
    message = finished.stdout.split("LOAD FAILED:", 1)[1]
    assert "Spark's Python workers cannot import changestream" in message
    assert "No module named 'changestream'" in message
    assert "spark.pyspark.python or PYSPARK_PYTHON" in message and sys.executable in message
    assert "ModuleNotFoundError" not in message.split("(", 1)[0]
