"""Property: any sequence of ADD COLUMN, DROP COLUMN and writes keeps ``db.read`` equal to a
model, and every record of a FOR ALL stream carries the columns the table had when it was
committed."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

import changestream
from changestream import DataChangeRecord
from changestream.embedded.database import store_of

NAMES = ["A", "B", "C", "D"]
TYPES = {
    "INT64": st.integers(-5, 5) | st.none(),
    "STRING(MAX)": st.text("xyz", max_size=3) | st.none(),
}

operation = st.one_of(
    st.tuples(st.just("add"), st.sampled_from(NAMES), st.sampled_from(sorted(TYPES))),
    st.tuples(st.just("drop"), st.sampled_from(NAMES), st.just("")),
    st.tuples(st.just("write"), st.integers(0, 4), st.just("")),
    st.tuples(st.just("delete"), st.integers(0, 4), st.just("")),
)


@settings(max_examples=80, deadline=None)
@given(st.lists(operation, min_size=1, max_size=12), st.data())
def test_column_changes_and_writes_match_a_model(
    ops: list[tuple[str, Any, str]], data: Any
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "p.db")
        with changestream.open(path) as db:
            db.set_split_policy(enabled=False)
            db.execute_ddl(
                [
                    "CREATE TABLE T (K INT64 NOT NULL) PRIMARY KEY (K)",
                    "CREATE CHANGE STREAM S FOR ALL OPTIONS (value_capture_type = 'NEW_ROW')",
                ]
            )
            start = store_of(db).last_commit_ts() + 1
            columns: dict[str, str] = {}  # name → type, in table order
            rows: dict[int, dict[str, Any]] = {}
            schema_at: list[tuple[int, list[str]]] = []  # (commit ts, columns) of each write
            for kind, arg, column_type in ops:
                if kind == "add" and arg not in columns:
                    db.execute_ddl(f"ALTER TABLE T ADD COLUMN {arg} {column_type}")
                    columns[arg] = column_type
                    for row in rows.values():
                        row[arg] = None
                elif kind == "drop" and arg in columns:
                    db.execute_ddl(f"ALTER TABLE T DROP COLUMN {arg}")
                    del columns[arg]
                    for row in rows.values():
                        del row[arg]
                elif kind == "write":
                    values = {c: data.draw(TYPES[t], label=c) for c, t in columns.items()}
                    recorded = values or arg not in rows  # a key-only rewrite changes nothing
                    with db.transaction() as tx:
                        tx.insert_or_update("T", ["K", *values], [[arg, *values.values()]])
                    rows[arg] = values
                    if recorded:
                        schema_at.append((store_of(db).last_commit_ts(), ["K", *columns]))
                elif kind == "delete" and arg in rows:
                    with db.transaction() as tx:
                        tx.delete("T", [[arg]])
                    del rows[arg]
            expected = [(k, *rows[k].values()) for k in sorted(rows)]
            assert db.read("T") == expected
            if schema_at:
                (partition,) = db.partitions("S")
                end = store_of(db).last_commit_ts()
                shapes = {
                    r.commit_timestamp: sorted(
                        (c for c in r.column_types), key=lambda c: c.ordinal_position
                    )
                    for r in db.read_change_stream("S", start, end, partition.token)
                    if isinstance(r, DataChangeRecord) and r.mod_type != "DELETE"
                }
                for ts, names in schema_at:
                    assert [c.name for c in shapes[ts]] == names
