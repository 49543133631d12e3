"""``changestream demo --pipeline``, run the way users run it: as a command, in its own
process (it starts and stops its own Spark session), on real files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from changestream.cli import main
from changestream.datastream.files import event_files, read_events

pytestmark = pytest.mark.spark


def test_pipeline_demo_streams_into_files_and_a_replica_equal_to_the_source(
    tmp_path: Path,
) -> None:
    pytest.importorskip("pyspark")
    directory = tmp_path / "demo"
    finished = subprocess.run(
        [sys.executable, "-m", "changestream", "demo", "--pipeline", "3", "--dir", str(directory)],
        capture_output=True,
        text=True,
        timeout=280,
        env={**os.environ, "COLUMNS": "250"},
    )
    assert finished.returncode == 0, (finished.stdout[-3000:], finished.stderr[-3000:])
    out = finished.stdout
    assert "Traceback" not in out + finished.stderr
    # The final check: the Delta replica equals the source, row for row.
    assert "replica equals source:" in out and "row for row" in out, out[-2000:]
    assert "stream orders: Paused" in out
    assert '"read_method": "changestream-cdc"' in out  # one event, pretty-printed
    files = event_files(directory / "events")
    assert files and all(f.suffix == ".jsonl" for f in files)
    events = [e for f in files for e in read_events(f)]
    methods = {e["read_method"] for e in events}
    assert methods == {"changestream-backfill", "changestream-cdc"}
    assert len({e["uuid"] for e in events}) == len(events)
    assert (directory / "replica" / "shop_Orders" / "_delta_log").is_dir()
    assert (directory / "shop.db").is_file()


def test_pipeline_demo_options_are_checked() -> None:
    runner = CliRunner()
    result = runner.invoke(main, ["demo", "--pipeline", "--load", "5"])
    assert result.exit_code == 2 and "does not combine" in result.output
    result = runner.invoke(main, ["demo", "--dir", "somewhere"])
    assert result.exit_code == 2 and "--dir applies to --pipeline only" in result.output
    result = runner.invoke(main, ["demo", "--pipeline", "0.5"])
    assert result.exit_code == 2 and "--pipeline" in result.output


def test_pipeline_demo_refuses_a_directory_that_is_not_empty(tmp_path: Path) -> None:
    (tmp_path / "something").write_text("keep me")
    result = CliRunner().invoke(main, ["demo", "--pipeline", "--dir", str(tmp_path)])
    assert result.exit_code == 2
    assert result.output.startswith("error: ") and "not an empty directory" in result.output
    assert (tmp_path / "something").read_text() == "keep me"
