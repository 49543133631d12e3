"""What a process loads: sqlglot only once SQL or a DEFAULT expression is parsed.

sqlglot's classes and functions are most of a changestream process's long-lived objects
(28,000 of 41,000), and every full garbage collection walks them all: a process that only
writes rows, reads change streams and watches them must not carry them.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = """
import sys
import changestream

def loaded():
    return "sqlglot" in sys.modules

with changestream.open(sys.argv[1]) as db:
    db.execute_ddl([
        "CREATE TABLE T (K INT64 NOT NULL, V STRING(MAX)) PRIMARY KEY (K)",
        "CREATE CHANGE STREAM S FOR T",
    ])
    start = db.ensure_watch_stream().now
    with db.transaction() as tx:
        tx.insert("T", ["K", "V"], [[1, "a"], [2, "b"]])
        tx.update("T", ["K", "V"], [[1, "c"]])
    (partition,) = db.partitions("S")
    end = db.ensure_watch_stream().now
    records = list(db.read_change_stream("S", partition.start_timestamp, end, partition.token))
    with db.watch(start_at_operation_time=start) as cursor:
        events = [cursor.try_next() for _ in range(2)]
    changes = [r for r in records if isinstance(r, changestream.DataChangeRecord)]
    print("rows", loaded(), len(changes), [e["operationType"] for e in events])
    rows = list(db.execute_sql("SELECT V FROM T ORDER BY K"))
    print("sql", loaded(), rows)
"""

DEFAULTS = """
import sys
import changestream

with changestream.open(sys.argv[1]) as db:
    db.execute_ddl("CREATE TABLE D (K INT64 NOT NULL, V INT64 DEFAULT (7)) PRIMARY KEY (K)")
    with db.transaction() as tx:
        tx.insert("D", ["K"], [[1]])
    print("default", "sqlglot" in sys.modules, db.read("D"))
"""


def run(script: str, path: Path) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_rows_streams_and_watch_leave_sqlglot_unloaded_until_sql_is_run(tmp_path: Path) -> None:
    assert run(SCRIPT, tmp_path / "rows.db") == [
        "rows False 1 ['insert', 'insert']",
        "sql True [['c'], ['b']]",
    ]


def test_a_default_expression_loads_sqlglot_to_parse_it(tmp_path: Path) -> None:
    assert run(DEFAULTS, tmp_path / "defaults.db") == ["default True [(1, 7)]"]


CLI = """
import sys
from click.testing import CliRunner
from changestream.cli.main import main

runner = CliRunner()
listed = runner.invoke(main, ["streams", "list", "--db", sys.argv[1]])
print("streams", listed.exit_code, "sqlglot" in sys.modules)
listed = runner.invoke(main, ["sources", "list", "--db", sys.argv[1]])
print("sources", listed.exit_code, "sqlglot" in sys.modules)
"""


def test_the_cli_loads_sqlglot_only_for_a_sources_command(tmp_path: Path) -> None:
    """The sources commands parse MySQL DDL with sqlglot; the other commands (a pipeline run,
    a stream listed) must not wait the tenth of a second its import takes."""
    path = tmp_path / "cli.db"
    run("import changestream, sys; changestream.open(sys.argv[1]).close()", path)
    assert run(CLI, path) == ["streams 0 False", "sources 0 True"]
