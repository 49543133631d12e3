"""The Delta Lake replica: MERGE per batch, deletes, every column type equal to the source,
idempotence under replayed and out-of-order batches, and a property test over random histories
split into random batches."""

from __future__ import annotations

import dataclasses
import decimal
import itertools
import random
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from hypothesis import given, settings
from hypothesis import strategies as st

import changestream
from changestream.clock import now_us
from changestream.datastream.events import CdcMod, Event, backfill_events, cdc_events
from changestream.datastream.files import EventFileWriter, event_files, read_events
from changestream.ddl.schema import Table
from changestream.errors import InvalidArgument
from changestream.spark.history import HistoryReplica
from changestream.spark.replica import SORT_KEY_COLUMN, DeltaReplica, latest_per_key, sort_key_text
from tests.datastream_support import (
    ALL_TYPES_DDL,
    PK,
    SAMPLE_DDL,
    T0,
    all_types_rows,
    open_db,
    read_mods,
    seed_events,
    table_of,
)

SAMPLE = table_of(SAMPLE_DDL)
KV_DDL = "CREATE TABLE KV (K INT64 NOT NULL, V STRING(MAX)) PRIMARY KEY (K)"
KV = table_of(KV_DDL)


def raw_rows(replica: DeltaReplica) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = DeltaTable(str(replica.path)).to_pyarrow_table().to_pylist()
    return rows


def test_seed_flow_updates_then_deletes_the_row(tmp_path: Path) -> None:
    insert, update, delete = seed_events(tmp_path, "NEW_ROW_AND_OLD_VALUES")
    replica = DeltaReplica(tmp_path / "replica", "DB1", SAMPLE)
    assert replica.path == tmp_path / "replica" / "DB1_SAMPLE"

    assert replica.apply([insert]).inserted == 1
    assert replica.read_rows() == [(PK, "foo", "TLV")]
    assert replica.apply([update]).updated == 1
    assert replica.read_rows() == [(PK, None, "TLV")]
    assert replica.apply([delete]).updated == 1
    assert replica.read_rows() == []
    (tombstone,) = raw_rows(replica)
    assert tombstone["_cs_deleted"] is True
    assert tombstone["_cs_uuid"] == delete.uuid
    assert tombstone["_cs_sort_key"] == sort_key_text(delete.sort_keys)


def test_one_batch_collapses_to_the_last_event_per_key(tmp_path: Path) -> None:
    events = seed_events(tmp_path, "NEW_ROW")
    replica = DeltaReplica(tmp_path / "replica", "DB1", SAMPLE)
    stats = replica.apply(events[:2][::-1])  # order within a batch does not matter
    assert (stats.events, stats.rows, stats.inserted) == (2, 1, 1)
    assert replica.read_rows() == [(PK, None, "TLV")]


def test_every_type_matches_the_source_row_for_row(tmp_path: Path) -> None:
    db = open_db(
        str(tmp_path / "src.db"),
        [ALL_TYPES_DDL, "CREATE CHANGE STREAM S FOR ALL OPTIONS (value_capture_type = 'NEW_ROW')"],
    )
    table = table_of(ALL_TYPES_DDL)
    names = [c.name for c in table.columns]
    with db.transaction() as tx:
        tx.insert("AllTypes", names, [list(row) for row in all_types_rows()])
    snapshot = now_us()
    backfill = backfill_events("s", "shop", table, db.read("AllTypes"), snapshot, T0)
    changed = list(all_types_rows()[1])
    changed[0], changed[5] = 4, "new row"
    with db.transaction() as tx:
        tx.update("AllTypes", ["Id", "S", "AI"], [[2, "updated", [7, None]]])
        tx.delete("AllTypes", [[1]])
        tx.insert("AllTypes", names, [changed])
    mods = [mod for _, mod in read_mods(db, "S", snapshot + 1, now_us() + 1)]
    replica = DeltaReplica(tmp_path / "replica", "shop", table)
    replica.apply(backfill)
    replica.apply(cdc_events("s", "shop", table, mods, T0))

    assert replica.read_rows() == db.read("AllTypes")
    # Read back by the table's name alone: the replica records each column's type and key.
    by_name = DeltaReplica(tmp_path / "replica", "shop", "AllTypes")
    assert [(c.name, c.type) for c in by_name.table.columns] == [
        (c.name, c.type) for c in table.columns
    ]
    assert by_name.table.primary_key == table.primary_key
    assert by_name.read_rows() == db.read("AllTypes")
    db.close()
    schema = DeltaTable(str(replica.path)).to_pyarrow_table().schema
    assert schema.field("T").type == pa.timestamp("us", tz="UTC")
    assert schema.field("D").type == pa.date32()
    assert schema.field("N").type == pa.string()
    assert schema.field("Y").type == pa.binary()
    assert schema.field("AI").type.value_type == pa.int64()
    assert schema.names[-3:] == ["_cs_sort_key", "_cs_uuid", "_cs_deleted"]


def kv_events(*ops: tuple[int, int, str, str | None]) -> list[Event]:
    """CDC events of KV from (commit_ts, key, mod_type, value)."""
    return cdc_events(
        "s",
        "db",
        KV,
        [
            CdcMod(ts, str(ts), "0", 0, kind, {"K": key}, {} if value is None else {"V": value}, {})
            for ts, key, kind, value in ops
        ],
        T0,
    )


def test_replayed_and_out_of_order_batches_change_nothing(tmp_path: Path) -> None:
    first = kv_events((10, 1, "INSERT", "a"), (11, 2, "INSERT", "b"))
    second = kv_events((20, 1, "UPDATE", "a2"), (21, 2, "DELETE", None))
    third = kv_events((30, 2, "INSERT", "b3"), (31, 3, "INSERT", "c"))
    replica = DeltaReplica(tmp_path / "in_order", "db", KV)
    for batch in (first, second, third):
        replica.apply(batch)
    expected = [(1, "a2"), (2, "b3"), (3, "c")]
    assert replica.read_rows() == expected
    before = raw_rows(replica)

    for batch in (third, first, second, first):
        stats = replica.apply(batch)
        assert stats.skipped == stats.rows and stats.inserted == stats.updated == 0
    assert raw_rows(replica) == before

    reversed_replica = DeltaReplica(tmp_path / "reversed", "db", KV)
    for batch in (third, second, first):
        reversed_replica.apply(batch)
    assert reversed_replica.read_rows() == expected


def test_backfill_read_before_a_delete_does_not_resurrect_the_row(tmp_path: Path) -> None:
    backfill = backfill_events("s", "db", KV, [(1, "old"), (2, "kept")], 100, T0)
    delete = kv_events((150, 1, "DELETE", None))
    replica = DeltaReplica(tmp_path, "db", KV)
    replica.apply(delete)  # CDC after the snapshot lands first
    replica.apply(backfill)
    assert replica.read_rows() == [(2, "kept")]


def test_missing_table_and_empty_batches(tmp_path: Path) -> None:
    replica = DeltaReplica(tmp_path, "db", KV)
    assert replica.read_rows() == []
    assert replica.apply([]).version is None
    assert not replica.path.exists()
    replica.ensure()
    assert replica.read_rows() == []
    assert replica.ensure().version() == 0  # creating again is a no-op


def test_events_of_another_table_are_rejected(tmp_path: Path) -> None:
    replica = DeltaReplica(tmp_path, "db", KV)
    other = backfill_events("s", "db", SAMPLE, [(1, "a", "b")], 1, 1)
    with pytest.raises(InvalidArgument, match="this replica holds db_KV"):
        replica.apply(other)
    wider = table_of(KV_DDL.replace("V STRING(MAX)", "V STRING(MAX), W BOOL"))
    with pytest.raises(InvalidArgument, match="schema"):
        replica.apply(backfill_events("s", "db", wider, [(1, "a", True)], 1, 1))


def test_nullable_and_composite_keys(tmp_path: Path) -> None:
    table = table_of(
        "CREATE TABLE C (A STRING(MAX), B INT64 NOT NULL, V STRING(MAX)) PRIMARY KEY (A, B)"
    )
    replica = DeltaReplica(tmp_path, "db", table)
    replica.apply(backfill_events("s", "db", table, [(None, 1, "x"), ("a", 1, "y")], 10, T0))
    mods = [
        CdcMod(20, "1", "0", 0, "UPDATE", {"A": None, "B": 1}, {"V": "x2"}, {}),
        CdcMod(20, "1", "0", 1, "INSERT", {"A": None, "B": 0}, {"V": "z"}, {}),
        CdcMod(21, "2", "0", 0, "DELETE", {"A": "a", "B": 1}, {}, {}),
    ]
    stats = replica.apply(cdc_events("s", "db", table, mods, T0))
    assert (stats.inserted, stats.updated) == (1, 2)
    assert replica.read_rows() == [(None, 0, "z"), (None, 1, "x2")]


# -- property: any history, any split into batches, any batch order, with replays ------------

Op = tuple[int, str, str]  # key, "put" or "delete", value


def history(table: Table, ops: list[Op], snapshot_at: int) -> tuple[list[Event], dict[int, str]]:
    """Backfill events of the state after ``ops[:snapshot_at]`` plus CDC events of the rest,
    and the final state."""
    state: dict[int, str] = {}
    events: list[Event] = []
    mods: list[CdcMod] = []
    for index, (key, kind, value) in enumerate(ops):
        if index == snapshot_at:
            rows = sorted(state.items())
            events += backfill_events("s", "db", table, rows, 1_000 + 10 * index - 5, T0)
        ts = 1_000 + 10 * index
        if kind == "delete":
            if key not in state:
                continue
            del state[key]
            mod = CdcMod(ts, str(index), "0", 0, "DELETE", {"K": key}, {}, {})
        else:
            mod_type = "UPDATE" if key in state else "INSERT"
            state[key] = value
            mod = CdcMod(ts, str(index), "0", 0, mod_type, {"K": key}, {"V": value}, {})
        if index >= snapshot_at:
            mods.append(mod)
    if snapshot_at >= len(ops):
        events += backfill_events("s", "db", table, sorted(state.items()), 999_999, T0)
    events += cdc_events("s", "db", table, mods, T0)
    return events, state


ops_strategy = st.lists(
    st.tuples(
        st.integers(0, 3), st.sampled_from(["put", "put", "delete"]), st.text("xyz", max_size=3)
    ),
    min_size=1,
    max_size=20,
)


@settings(max_examples=25, deadline=None)
@given(ops=ops_strategy, data=st.data())
def test_any_batch_split_order_and_replay_gives_the_final_state(
    ops: list[Op], data: st.DataObject
) -> None:
    snapshot_at = data.draw(st.integers(0, len(ops)), label="snapshot_at")
    events, state = history(KV, ops, snapshot_at)
    seed = data.draw(st.integers(0, 2**32), label="seed")
    rng = random.Random(seed)
    cuts = sorted(
        rng.sample(range(1, len(events)), max(0, min(len(events) - 1, rng.randint(0, 4))))
    )
    bounds = zip([0, *cuts], [*cuts, len(events)], strict=True)
    batches = list(enumerate(events[a:b] for a, b in bounds))  # (batch id, events)
    rng.shuffle(batches)
    batches += rng.sample(batches, rng.randint(0, min(2, len(batches))))  # replays, same id

    with tempfile.TemporaryDirectory() as root:
        replica = DeltaReplica(Path(root) / "replica", "db", KV)
        files = EventFileWriter(Path(root) / "events", "json", max_file_bytes=2048)
        for batch_id, batch in batches:
            files.write_batch(batch, batch_id)
            replica.apply(batch)
        assert replica.read_rows() == sorted(state.items())
        # The event files hold exactly the events, each once: a replay rewrote the same files.
        written = [e["uuid"] for f in event_files(Path(root) / "events") for e in read_events(f)]
        assert sorted(written) == sorted(event.uuid for event in events)
        # Each key's replica row (tombstones included) carries its last event's uuid.
        # (No events, as when every op deletes a missing key: no table is made.)
        last = {event.payload["K"]: event.uuid for event in events}
        rows = raw_rows(replica) if events else []
        assert {row["K"]: row["_cs_uuid"] for row in rows} == last


def test_replica_of_a_real_workload_with_splits(tmp_path: Path) -> None:
    db = open_db(
        str(tmp_path / "src.db"),
        [
            KV_DDL,
            "CREATE CHANGE STREAM S FOR KV OPTIONS (value_capture_type = 'NEW_ROW_AND_OLD_VALUES')",
        ],
    )
    rng = random.Random(7)
    start = now_us()
    for round_ in range(30):
        with db.transaction() as tx:
            for key in rng.sample(range(40), 5):
                if rng.random() < 0.25:
                    tx.delete("KV", [[key]])
                else:
                    tx.insert_or_update("KV", ["K", "V"], [[key, f"v{round_}"]])
        if round_ == 10:
            db.split_at("KV", [20])
        if round_ == 20:
            db.merge_at("KV", [20])
    mods = [mod for _, mod in read_mods(db, "S", start, now_us() + 1)]
    events = cdc_events("s", "db", KV, mods, T0)
    replica = DeltaReplica(tmp_path / "replica", "db", KV)
    for at in range(0, len(events), 17):
        replica.apply(events[at : at + 17])
    assert replica.read_rows() == db.read("KV")
    db.close()


def _kv_events(start: int, keys: range, value: str) -> list[Event]:
    mods = [
        CdcMod(start + n, "t", "00000000", 0, "INSERT", {"K": str(n)}, {"V": value}, {})
        for n in keys
    ]
    return cdc_events("s", "DB1", KV, mods, start + keys.stop)


def test_maintain_compacts_small_files_and_vacuums_old_ones(tmp_path: Path) -> None:
    replica = DeltaReplica(tmp_path / "replica", "DB1", KV)
    replica.ensure()
    for batch in range(6):  # six small data files, as appends of new keys make them
        rows = replica.source_rows(
            _kv_events(1_000, range(20 * batch, 20 * batch + 20), f"v{batch}")
        )
        write_deltalake(str(replica.path), rows, mode="append")
    before = DeltaTable(str(replica.path)).file_uris()
    assert len(before) >= 6
    rows = replica.read_rows()
    done = replica.maintain(vacuum_retention_hours=0)
    after = DeltaTable(str(replica.path))
    assert done["removed"] >= 6 and done["added"] < done["removed"]
    assert len(after.file_uris()) < len(before)
    # Vacuum deleted the files only old versions needed; the live rows are unchanged.
    assert done["vacuumed"] >= len(before) - len(after.file_uris())
    on_disk = {p.name for p in replica.path.glob("*.parquet")}
    assert on_disk == {Path(f).name for f in after.file_uris()}
    expected = [(n, "updated" if n % 7 == 0 else f"v{n // 20}") for n in range(120)]
    assert rows == [(n, f"v{n // 20}") for n in range(120)]
    assert replica.read_rows() == rows
    replica.apply(_kv_events(2_000, range(0, 120, 7), "updated"))  # MERGEs go on as before
    assert replica.read_rows() == expected
    assert DeltaReplica(tmp_path / "missing", "DB1", KV).maintain(0) == {
        "removed": 0,
        "added": 0,
        "vacuumed": 0,
    }


KVW = table_of("CREATE TABLE KV (K INT64 NOT NULL, V STRING(MAX), W INT64) PRIMARY KEY (K)")


@pytest.mark.parametrize("drop", [False, True])
def test_a_column_dropped_from_the_source_is_kept_or_dropped_per_the_setting(
    tmp_path: Path, drop: bool
) -> None:
    wide = DeltaReplica(tmp_path, "db", KVW)
    wide_events = cdc_events(
        "s", "db", KVW, [CdcMod(10, "10", "0", 0, "INSERT", {"K": 1}, {"V": "a", "W": "5"}, {})], T0
    )
    wide.apply(wide_events)
    narrow = DeltaReplica(tmp_path, "db", KV, drop_dropped_columns=drop)
    narrow.apply(kv_events((20, 2, "INSERT", "b"), (21, 1, "UPDATE", "a2")))
    rows = sorted(raw_rows(narrow), key=lambda row: row["K"])
    assert [(row["K"], row["V"]) for row in rows] == [(1, "a2"), (2, "b")]
    names = DeltaTable(str(narrow.path)).schema().fields
    assert ("W" in [f.name for f in names]) is not drop
    if not drop:
        assert [row["W"] for row in rows] == [5, None]  # the value it had, and null after
    assert narrow.read_rows() == [(1, "a2"), (2, "b")]
    # Replaying the batch after the rewrite changes nothing: sort keys survived it.
    assert narrow.apply(kv_events((21, 1, "UPDATE", "a2"))).updated == 0


def test_a_column_added_with_a_default_fills_the_rows_the_replica_had(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The source gives its existing rows a constant DEFAULT without a change per row; the
    replica's rows from before the column read it too. A default computed per row cannot be
    known: those rows read NULL, and a warning says how to read the table anew."""
    narrow = DeltaReplica(tmp_path, "db", KV)
    narrow.apply(kv_events((10, 1, "INSERT", "a"), (11, 2, "INSERT", "b")))
    wide_ddl = (
        "CREATE TABLE KV (K INT64 NOT NULL, V STRING(MAX), W INT64 NOT NULL DEFAULT (7), "
        "U STRING(MAX) DEFAULT (GENERATE_UUID()), N NUMERIC DEFAULT (NUMERIC '1.5')) "
        "PRIMARY KEY (K)"
    )
    wide_table = table_of(wide_ddl)
    wide = DeltaReplica(tmp_path, "db", wide_table)
    later = CdcMod(
        20, "20", "0", 0, "INSERT", {"K": 3}, {"V": "c", "W": "8", "U": "u", "N": None}, {}
    )
    with caplog.at_level("WARNING", logger="changestream.spark.replica"):
        wide.apply(cdc_events("s", "db", wide_table, [later], T0))
    assert wide.read_rows() == [
        (1, "a", 7, None, decimal.Decimal("1.5")),
        (2, "b", 7, None, decimal.Decimal("1.5")),
        (3, "c", 8, "u", None),
    ]
    assert "['U'] were added with a DEFAULT computed per row" in caplog.text
    # The columns are there now: a replayed batch fills nothing again.
    caplog.clear()
    version = DeltaTable(str(wide.path)).version()
    assert wide.apply(cdc_events("s", "db", wide_table, [later], T0)).updated == 0
    assert DeltaTable(str(wide.path)).version() == version
    assert "computed per row" not in caplog.text


def _kv_with_w(w_ddl: str, added_at: int | None) -> Table:
    table = table_of(f"CREATE TABLE KV (K INT64 NOT NULL, V STRING(MAX), {w_ddl}) PRIMARY KEY (K)")
    (k, v, w) = table.columns
    return dataclasses.replace(table, columns=(k, v, dataclasses.replace(w, added_at=added_at)))


def _w_insert(table: Table, ts: int, key: int, w: str | None) -> list[Event]:
    mod = CdcMod(ts, str(ts), "0", 0, "INSERT", {"K": key}, {"V": "v", "W": w}, {})
    return cdc_events("s", "db", table, [mod], T0)


@pytest.mark.parametrize("history", [False, True])
def test_a_column_added_again_under_a_dropped_ones_name_is_a_new_column(
    tmp_path: Path, history: bool
) -> None:
    """Rows keep the former column's values only in a history, and only while the type
    allows; a replica of current rows gets the new column's NULL or DEFAULT."""
    kind = HistoryReplica if history else DeltaReplica
    first = _kv_with_w("W INT64", added_at=5)
    kind(tmp_path, "db", first).apply(_w_insert(first, 10, 1, "7"))
    same_type = _kv_with_w("W INT64 DEFAULT (3)", added_at=20)
    replica = kind(tmp_path, "db", same_type)
    replica.apply(_w_insert(same_type, 30, 2, "8"))
    rows = [row[:3] for row in replica.read_rows()]
    assert rows == ([(1, "v", 7), (2, "v", 8)] if history else [(1, "v", 3), (2, "v", 8)])
    other_type = _kv_with_w("W STRING(MAX)", added_at=40)
    replica = kind(tmp_path, "db", other_type)
    replica.apply(_w_insert(other_type, 50, 3, "x"))
    rows = [row[:3] for row in replica.read_rows()]
    expected = [(1, "v", None), (2, "v", None), (3, "v", "x")]
    assert rows == expected
    assert DeltaReplica(tmp_path, "db", "KV").table.columns[2].added_at == 40  # recorded


def test_a_new_string_length_keeps_the_values_and_rewrites_the_table_once(
    tmp_path: Path,
) -> None:
    short = table_of("CREATE TABLE KV (K INT64 NOT NULL, V STRING(10)) PRIMARY KEY (K)")
    DeltaReplica(tmp_path, "db", KV).apply(kv_events((10, 1, "INSERT", "a")))
    replica = DeltaReplica(tmp_path, "db", short)
    later = cdc_events(
        "s", "db", short, [CdcMod(20, "20", "0", 0, "INSERT", {"K": 2}, {"V": "b"}, {})], T0
    )
    replica.apply(later)
    assert replica.read_rows() == [(1, "a"), (2, "b")]
    assert DeltaReplica(tmp_path, "db", "KV").table.columns[1].type.length == 10
    version = DeltaTable(str(replica.path)).version()
    replica.apply(later)  # the shape is the source's now: no rewrite, no commit
    assert DeltaTable(str(replica.path)).version() == version


def test_a_replica_read_by_name_needs_one_that_records_its_types(tmp_path: Path) -> None:
    with pytest.raises(changestream.NotFound, match="no replica of table 'KV'"):
        DeltaReplica(tmp_path, "db", "KV")
    write_deltalake(str(tmp_path / "db_Old"), pa.table({"K": [1], "_cs_sort_key": ["0"]}))
    with pytest.raises(changestream.FailedPrecondition, match="pass the source's Table"):
        DeltaReplica(tmp_path, "db", "Old")


def test_a_replica_in_a_path_with_spaces_reads_back(tmp_path: Path) -> None:
    """Delta URI-encodes file paths; the replica's own reader decodes them."""
    replica = DeltaReplica(tmp_path / "my replicas", "db", KV)
    replica.apply(kv_events((10, 1, "INSERT", "a"), (11, 2, "INSERT", "b")))
    assert DeltaReplica(tmp_path / "my replicas", "db", "KV").read_rows() == [(1, "a"), (2, "b")]


def test_reading_a_replica_lets_a_short_lived_process_exit_cleanly(tmp_path: Path) -> None:
    """deltalake's own readers can abort a process at exit (delta-rs issue 2184); read_rows
    reads the Parquet files itself. Several runs, since the abort is a race."""
    replica = DeltaReplica(tmp_path, "db", KV)
    replica.apply(kv_events((10, 1, "INSERT", "a")))
    script = (
        "import sys\n"
        "from changestream.spark.replica import DeltaReplica\n"
        "print(DeltaReplica(sys.argv[1], 'db', 'KV').read_rows())\n"
    )
    for _ in range(6):
        ran = subprocess.run(
            [sys.executable, "-c", script, str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert (ran.returncode, ran.stdout) == (0, "[(1, 'a')]\n"), ran.stderr[-500:]


def test_the_replica_has_a_change_data_feed(tmp_path: Path) -> None:
    """Delta's change data feed is on, so a downstream job reads the replica's own changes."""
    old = tmp_path / "db_KV"
    write_deltalake(str(old), DeltaReplica(tmp_path, "db", KV).schema.empty_table())
    replica = DeltaReplica(tmp_path, "db", KV)  # a replica made before: the feed is turned on
    replica.apply(kv_events((10, 1, "INSERT", "a"), (11, 2, "INSERT", "b")))
    replica.apply(kv_events((20, 1, "UPDATE", "a2"), (21, 2, "DELETE", None)))
    delta = DeltaTable(str(replica.path))
    assert delta.metadata().configuration["delta.enableChangeDataFeed"] == "true"
    # Version 0 predates the feed (a replica made before it); 1 turned it on.
    changes = pa.table(delta.load_cdf(starting_version=1).read_all()).to_pylist()
    seen = sorted(
        ((c["K"], c["V"], c["_change_type"], c["_cs_deleted"]) for c in changes),
        key=lambda change: (change[0], change[2]),
    )
    assert seen == [
        (1, "a", "insert", False),
        (1, "a2", "update_postimage", False),
        (1, "a", "update_preimage", False),
        (2, "b", "insert", False),
        (2, None, "update_postimage", True),  # a delete is a tombstone: an update here
        (2, "b", "update_preimage", False),
    ]


def test_an_append_only_replica_keeps_every_event_in_order(tmp_path: Path) -> None:
    history = HistoryReplica(tmp_path, "db", KV)
    first = kv_events((10, 1, "INSERT", "a"), (11, 2, "INSERT", "b"))
    second = kv_events((20, 1, "UPDATE", "a2"), (21, 2, "DELETE", None), (22, 1, "UPDATE", "a3"))
    assert history.apply(second).inserted == 3  # out of order: the history sorts it
    assert history.apply(first).inserted == 2
    assert history.apply(first + second).inserted == 0  # replayed: nothing appended
    rows = history.read_rows()
    assert [(k, v, change) for k, v, change, _ in rows] == [
        (1, "a", "INSERT"),
        (2, "b", "INSERT"),
        (1, "a2", "UPDATE-INSERT"),
        (2, None, "DELETE"),
        (1, "a3", "UPDATE-INSERT"),
    ]
    stamps = [stamp for *_, stamp in rows]
    assert stamps == sorted(stamps) and all(s.tzinfo is not None for s in stamps)
    assert DeltaReplica(tmp_path, "db", "KV").table.primary_key == ("K",)


def test_an_append_only_replica_writes_the_row_before_an_update_when_records_hold_it(
    tmp_path: Path,
) -> None:
    history = HistoryReplica(tmp_path, "db", KVW)

    def mod(ts: int, kind: str, new: dict[str, Any], old: dict[str, Any]) -> CdcMod:
        return CdcMod(ts, str(ts), "0", 0, kind, {"K": 1}, new, old)

    events = cdc_events(
        "s",
        "db",
        KVW,
        [
            mod(10, "INSERT", {"V": "a", "W": "5"}, {}),
            mod(20, "UPDATE", {"V": "a2", "W": "5"}, {"V": "a"}),  # NEW_ROW_AND_OLD_VALUES
            mod(30, "UPDATE", {"V": "a3", "W": "6"}, {}),  # NEW_ROW: no old values
            mod(40, "DELETE", {}, {"V": "a3", "W": "6"}),
        ],
        T0,
    )
    assert events[1].row_before() == {"K": 1, "V": "a", "W": 5}
    assert events[2].row_before() is None
    assert history.apply(events).inserted == 5
    assert history.apply(events).inserted == 0  # replayed: nothing appended
    assert [row[:4] for row in history.read_rows()] == [
        (1, "a", 5, "INSERT"),
        (1, "a", 5, "UPDATE-DELETE"),
        (1, "a2", 5, "UPDATE-INSERT"),
        (1, "a3", 6, "UPDATE-INSERT"),
        (1, "a3", 6, "DELETE"),
    ]


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 3) | st.none(), st.sampled_from("ab"), st.integers(0, 50)),
        max_size=30,
        unique_by=lambda row: row[2],
    )
)
def test_latest_per_key_keeps_each_keys_row_with_the_highest_sort_key(
    rows: list[tuple[int | None, str, int]],
) -> None:
    """Keys of two columns, NULL among them, each once or many times (when each is there
    once the rows come back as they are, unsorted)."""
    table = pa.table(
        {
            "K1": pa.array([r[0] for r in rows], pa.int64()),
            "K2": pa.array([r[1] for r in rows], pa.string()),
            SORT_KEY_COLUMN: pa.array([sort_key_text((r[2], 1, 0, 0)) for r in rows]),
        }
    )
    expected: dict[tuple[int | None, str], int] = {}
    for k1, k2, order in rows:
        expected[(k1, k2)] = max(order, expected.get((k1, k2), order))
    latest = latest_per_key(table, ["K1", "K2"]).to_pylist()
    assert len(latest) == len(expected)
    assert {(r["K1"], r["K2"]): r[SORT_KEY_COLUMN] for r in latest} == {
        key: sort_key_text((order, 1, 0, 0)) for key, order in expected.items()
    }


@settings(max_examples=80, deadline=None)
@given(
    changes=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 12), st.booleans()), max_size=40),
    cuts=st.lists(st.integers(0, 40), max_size=6),
)
def test_a_tasks_staged_chunks_keep_each_keys_newest_change(
    changes: list[tuple[int, int, bool]], cuts: list[int]
) -> None:
    """Changes of few keys, cut into chunks at random places as a task stages them (a key's
    changes in several chunks, or several times in one; sort keys may repeat): each key's
    staged row is its change with the highest sort key, the last of those when several
    share it."""
    replica = DeltaReplica("unused", "db", KV)
    bounds = [0, *sorted(min(cut, len(changes)) for cut in cuts), len(changes)]
    parts = []
    for begin, end in itertools.pairwise(bounds):
        chunk = list(enumerate(changes))[begin:end]
        parts.append(
            replica.change_rows(
                [{"K": key, "V": f"v{at}"} for at, (key, _, _) in chunk],
                [
                    [order for _, (_, order, _) in chunk],
                    [1] * len(chunk),
                    [0] * len(chunk),
                    [0] * len(chunk),
                ],
                [f"u{at}" for at, _ in chunk],
                [gone for _, (_, _, gone) in chunk],
            )
        )
    expected: dict[int, tuple[int, int, bool]] = {}
    for at, (key, order, gone) in enumerate(changes):
        if key not in expected or order >= expected[key][0]:
            expected[key] = (order, at, gone)
    staged = replica.staged(parts)
    assert staged.schema == replica.schema
    assert sorted(staged.to_pylist(), key=lambda row: row["K"]) == [
        {
            "K": key,
            "V": f"v{at}",
            SORT_KEY_COLUMN: sort_key_text((order, 1, 0, 0)),
            "_cs_uuid": f"u{at}",
            "_cs_deleted": gone,
        }
        for key, (order, at, gone) in sorted(expected.items())
    ]
