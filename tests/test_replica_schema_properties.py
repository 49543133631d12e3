"""Property: whatever columns a table gains, loses, gains again under an old name (with or
without a DEFAULT) or lengthens between writes, and however its changes are cut into
micro-batches, the Delta replica fed with the change stream's events (and told each new shape
of the table, as the pipeline does) equals the table."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from hypothesis import event, given, settings
from hypothesis import strategies as st

import changestream
from changestream import DataChangeRecord
from changestream.clock import now_us
from changestream.datastream.events import record_events
from changestream.embedded.database import store_of
from changestream.spark.replica import DeltaReplica

NAMES = ["A", "B"]
VALUES = {
    "INT64": st.integers(-5, 5) | st.none(),
    "STRING": st.text("xyz", max_size=3) | st.none(),
}
DEFAULTS = {"INT64": ["", " DEFAULT (7)"], "STRING": ["", " DEFAULT ('d')"]}
#: Writes and batches come more often than DDL, so rows written and batched before a column
#: goes and comes back are common.
KINDS = ["add", "add", "drop", "lengthen", "write", "write", "write", "delete", "batch", "batch"]

operation = st.tuples(
    st.sampled_from(KINDS),
    st.sampled_from(NAMES),
    st.integers(0, 3),
    st.sampled_from(sorted(VALUES)),
    st.booleans(),
)


def _apply_batch(db: changestream.EmbeddedDatabase, root: Path, start: int) -> int:
    """Feed the replica the events of what was committed since ``start``, as a micro-batch
    read now does (the table as it is now); returns where the next batch starts."""
    end = store_of(db).last_commit_ts()
    if end < start:
        return start
    (partition,) = db.partitions("S")
    records = [
        r
        for r in db.read_change_stream("S", start, end, partition.token)
        if isinstance(r, DataChangeRecord) and r.table_name == "T"
    ]
    (table,) = db.tables()
    events = record_events("s", "db", table, records, now_us())
    replica = DeltaReplica(root, "db", table)
    replica.follow_schema()  # as the pipeline does when it first sees a table's shape
    replica.apply(events)
    return end + 1


@settings(max_examples=60, deadline=None)
@given(st.lists(operation, min_size=8, max_size=24), st.data())
def test_the_replica_equals_the_table_through_any_column_changes(
    ops: list[tuple[str, str, int, str, bool]], data: Any
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "replica"
        with changestream.open(str(Path(tmp) / "p.db")) as db:
            db.set_split_policy(enabled=False)
            db.execute_ddl(
                [
                    "CREATE TABLE T (K INT64 NOT NULL) PRIMARY KEY (K)",
                    "CREATE CHANGE STREAM S FOR ALL "
                    "OPTIONS (value_capture_type = 'NEW_ROW_AND_OLD_VALUES')",
                ]
            )
            start = store_of(db).last_commit_ts() + 1
            columns: dict[str, str] = {}  # name → type
            dropped: set[str] = set()
            readded = False
            for kind, name, key, column_type, with_default in ops:
                if kind == "add" and name not in columns:
                    default = DEFAULTS[column_type][with_default]
                    sql_type = "INT64" if column_type == "INT64" else "STRING(20)"
                    db.execute_ddl(f"ALTER TABLE T ADD COLUMN {name} {sql_type}{default}")
                    columns[name] = column_type
                    readded = readded or name in dropped
                elif kind == "drop" and name in columns:
                    db.execute_ddl(f"ALTER TABLE T DROP COLUMN {name}")
                    del columns[name]
                    dropped.add(name)
                elif kind == "lengthen" and columns.get(name) == "STRING":
                    db.execute_ddl(f"ALTER TABLE T ALTER COLUMN {name} STRING(MAX)")
                elif kind == "write":
                    values = {c: data.draw(VALUES[t], label=c) for c, t in columns.items()}
                    with db.transaction() as tx:
                        tx.insert_or_update("T", ["K", *values], [[key, *values.values()]])
                elif kind == "delete":
                    with db.transaction() as tx:
                        tx.delete("T", [[key]])
                elif kind == "batch":
                    start = _apply_batch(db, root, start)
            _apply_batch(db, root, start)
            (table,) = db.tables()
            event(f"rows: {len(db.read('T'))}, a column added again: {readded}")
            assert DeltaReplica(root, "db", table).read_rows() == db.read("T")
