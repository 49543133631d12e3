"""``changestream policy``: showing, changing and applying the split policy from a shell."""

from __future__ import annotations

import re
from pathlib import Path

import orjson
from click.testing import CliRunner

import changestream
from changestream.cli import main
from changestream.embedded.database import store_of
from tests.lineage import read_lineage


def test_policy_show_set_rebalance_and_errors(tmp_path: Path) -> None:
    path = str(tmp_path / "p.db")
    with changestream.open(path) as db:
        db.execute_ddl(
            ["CREATE TABLE T (K INT64 NOT NULL) PRIMARY KEY (K)", "CREATE CHANGE STREAM S FOR T"]
        )
        db.set_split_policy(enabled=False)
        with db.transaction() as tx:
            tx.insert("T", ["K"], [[i] for i in range(50)])
    runner = CliRunner()
    shown = runner.invoke(main, ["policy", path])
    assert shown.exit_code == 0
    assert orjson.loads(shown.output)["max_rows"] == 100_000
    changed = runner.invoke(
        main,
        [
            "policy",
            path,
            "--set",
            "max_rows=10",
            "--set",
            "merge_max_rows=2",
            "--set",
            "min_lifetime_seconds=0",
            "--rebalance",
        ],
    )
    assert changed.exit_code == 0, changed.output
    lines = [orjson.loads(line) for line in changed.output.splitlines()]
    assert lines[0]["max_rows"] == 10 and lines[0]["min_lifetime_seconds"] == 0
    assert lines[1] == {"action": "split", "reason": "50 rows > max_rows 10"}
    tree = runner.invoke(main, ["partitions", path, "S"], env={"COLUMNS": "250"})
    assert "[-∞, T(25))" in tree.output and "mods/s" in tree.output
    bad = runner.invoke(main, ["policy", path, "--set", "max_rows=x"])
    assert bad.exit_code == 2 and "max_rows must be a number" in bad.output
    unknown = runner.invoke(main, ["policy", path, "--set", "nope=1"])
    assert unknown.exit_code == 2 and "NAME one of enabled, max_rows" in unknown.output


def test_load_demo_splits_on_the_hot_range_and_loses_nothing(tmp_path: Path) -> None:
    path = str(tmp_path / "load.db")
    result = CliRunner().invoke(
        main, ["demo", "--load", "3", "--path", path], env={"COLUMNS": "120"}
    )
    assert result.exit_code == 0, result.output
    assert "split: new partition" in result.output
    assert "mods: all there." in result.output
    # Not on the demo's word: read the lineage again here, and check the mods against the
    # count of mods the writer made and against the table itself.
    found = re.search(r"([\d,]+) of ([\d,]+) mods", result.output)
    assert found is not None
    written = int(found.group(2).replace(",", ""))
    with changestream.open(path) as db:
        start = min(p.start_timestamp for p in db.partition_history("OrdersStream"))
        reads = read_lineage(db, "OrdersStream", start, store_of(db).last_commit_ts())
        mods = [
            (record.commit_timestamp, mod.keys["OrderId"])
            for read in reads
            for record in read.records
            for mod in record.mods
        ]
        stored = {row[0] for row in db.read("Orders")}
    assert len(reads) > 1
    assert len(mods) == len(set(mods)) == written  # every mod once
    assert {key for _, key in mods} == stored
