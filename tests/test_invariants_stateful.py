"""Random transactions, splits, merges and policy runs, with the seed's guarantees checked.

Invariants, checked at the end of every run against the tables and the lineage read with the
seed's workflow: (1) every committed mod is returned exactly once; (2) within a partition,
records come in commit order; (3) a key's record lies in the partition whose key range holds
the key at that time; (4) a child's records come only after all its parents ended; (5)
replaying the mods in order rebuilds every table exactly; (6) heartbeats never promise falsely.
DDL runs between steps (value capture type changes, tables created and dropped). The concurrent
variant adds bursts of writers committing at once from threads, each with its own connection,
and from a second process; the remote variant commits every transaction through
``changestream.connect(url)`` to a server holding the database; the retention variant keeps
one hour of changes and lets the clock jump past it: expired changes are gone (reads before the
window fail), the rest still come exactly once.
``CHANGESTREAM_STORM=long`` runs many more examples.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from typing import Any

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import changestream
from changestream import AlreadyExists, FailedPrecondition, HeartbeatRecord, NotFound, OutOfRange
from changestream.clock import now_us, parse_ts
from changestream.embedded.database import store_of
from changestream.store.keys import encode_key
from changestream.store.splits import load_split
from changestream.streams.read import ChangeStreamReader, ReadRequest
from changestream.streams.tokens import decode_token
from tests.lineage import read_lineage
from tests.server_support import serving

LONG = os.environ.get("CHANGESTREAM_STORM") == "long"
TABLES = {
    "A": "CREATE TABLE A (K INT64 NOT NULL, V INT64) PRIMARY KEY (K)",
    # G is a nullable key column: NULL is one more value of it.
    "B": "CREATE TABLE B (G STRING(MAX), N INT64 NOT NULL, V STRING(MAX)) PRIMARY KEY (G, N)",
}
COLUMNS = {"A": ("K", "V"), "B": ("G", "N", "V")}
KEY_WIDTH = {"A": 1, "B": 2}

a_keys = st.tuples(st.integers(0, 30))
b_keys = st.tuples(st.sampled_from([None, "g", "m", "t"]), st.integers(0, 10))
table_keys = st.one_of(st.tuples(st.just("A"), a_keys), st.tuples(st.just("B"), b_keys))


def value_for(table: str, n: int) -> Any:
    return n if table == "A" else f"v{n}"


operation = st.one_of(
    st.tuples(
        st.sampled_from(["insert", "upsert", "update", "replace"]), table_keys, st.integers(0, 99)
    ),
    st.tuples(st.just("delete"), table_keys, st.just(0)),
    st.tuples(st.just("dml_bump_a"), st.just(("A", ())), st.integers(0, 30)),
    st.tuples(st.just("dml_drop_b"), st.just(("B", ())), st.integers(0, 10)),
)


class Model:
    """The tables as plain dicts, changed the way Spanner's mutations and our DML change them."""

    def __init__(self) -> None:
        self.rows: dict[str, dict[tuple[Any, ...], Any]] = {"A": {}, "B": {}}

    def copy(self) -> Model:
        other = Model()
        other.rows = {t: dict(r) for t, r in self.rows.items()}
        return other

    def apply(
        self, op: str, table: str, key: tuple[Any, ...], n: int
    ) -> set[tuple[str, tuple[Any, ...]]]:
        """Apply one operation; returns the (table, key) pairs it wrote."""
        rows = self.rows[table]
        if op == "insert":
            if key in rows:
                raise AlreadyExists(key)
            rows[key] = value_for(table, n)
        elif op in ("upsert", "replace"):
            rows[key] = value_for(table, n)
        elif op == "update":
            if key not in rows:
                raise NotFound(key)
            rows[key] = value_for(table, n)
        elif op == "delete":
            rows.pop(key, None)
        elif op == "dml_bump_a":
            hit = [k for k in rows if k[0] < n]
            for k in hit:
                rows[k] = None if rows[k] is None else rows[k] + 1
            return {(table, k) for k in hit}
        else:
            hit = [k for k in rows if k[1] > n]
            for k in hit:
                del rows[k]
            return {(table, k) for k in hit}
        return {(table, key)}


def run(tx: changestream.Transaction, op: str, table: str, key: tuple[Any, ...], n: int) -> None:
    row = [*key, value_for(table, n)]
    if op == "insert":
        tx.insert(table, COLUMNS[table], [row])
    elif op == "upsert":
        tx.insert_or_update(table, COLUMNS[table], [row])
    elif op == "replace":
        tx.replace(table, COLUMNS[table], [row])
    elif op == "update":
        tx.update(table, COLUMNS[table], [row])
    elif op == "delete":
        tx.delete(table, [key])
    elif op == "dml_bump_a":
        tx.execute_update("UPDATE A SET V = V + 1 WHERE K < @n", {"n": n})
    else:
        tx.execute_update("DELETE FROM B WHERE N > @n", {"n": n})


class ChangeStreamMachine(RuleBasedStateMachine):
    @initialize()
    def open_database(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="cs-stateful-")
        self.db = self.open_file(os.path.join(self.dir, "db.sqlite"))
        self.db.set_split_policy(
            enabled=False,
            max_rows=8,
            merge_max_rows=4,
            max_write_rate=2.0,
            merge_max_write_rate=1.0,
            window_seconds=1.0,
            min_lifetime_seconds=0,
        )
        self.db.execute_ddl(
            [*TABLES.values(), f"CREATE CHANGE STREAM S FOR ALL OPTIONS ({self.options()})"]
        )
        self.writer: changestream.Database = self.db
        #: The tables as they were where the readable log begins (empty until changes expire).
        self.replay_base: dict[str, dict[tuple[Any, ...], Any]] = {"A": {}, "B": {}}
        self.scratch_tables = 0
        self.start = store_of(self.db).catalog().stream("S").created_ts
        self.model = Model()
        # (commit_ts, table, key, mod_type) for every mod the stream must return.
        self.expected: set[tuple[int, str, tuple[Any, ...], str]] = set()
        self.heartbeats: list[tuple[str, int, int, set[int]]] = []

    @rule(ops=st.lists(operation, min_size=1, max_size=6))
    def transaction(self, ops: list[tuple[str, tuple[str, tuple[Any, ...]], int]]) -> None:
        model = self.model.copy()
        touched: set[tuple[str, tuple[Any, ...]]] = set()
        expected_error: type[Exception] | None = None
        # DML runs when it is called; mutations are buffered and applied at commit (Spanner).
        in_effect_order = [o for o in ops if o[0].startswith("dml")] + [
            o for o in ops if not o[0].startswith("dml")
        ]
        for op, (table, key), n in in_effect_order:
            try:
                touched |= model.apply(op, table, key, n)
            except (AlreadyExists, NotFound) as exc:
                expected_error = type(exc)
                break
        try:
            with self.writer.transaction() as tx:
                for op, (table, key), n in ops:
                    run(tx, op, table, key, n)
        except (AlreadyExists, NotFound) as exc:
            assert expected_error is type(exc), (ops, exc)
            return
        assert expected_error is None, ops
        assert tx.commit_timestamp is not None
        ts = parse_ts(tx.commit_timestamp)
        for table, key in touched:
            before, after = key in self.model.rows[table], key in model.rows[table]
            if before or after:
                kind = "INSERT" if not before else "DELETE" if not after else "UPDATE"
                self.expected.add((ts, table, key, kind))
        self.model = model

    @rule(where=table_keys)
    def split(self, where: tuple[str, tuple[Any, ...]]) -> None:
        table, key = where
        with contextlib.suppress(FailedPrecondition):
            self.db.split_at(table, key)

    @precondition(lambda self: len(store_of(self.db).live_splits()) > 1)
    @rule(index=st.integers(0, 100))
    def merge(self, index: int) -> None:
        boundaries = [s.start_key for s in store_of(self.db).live_splits() if s.start_key]
        store_of(self.db).change_split_boundary(boundaries[index % len(boundaries)], merge=True)

    @rule()
    def rebalance(self) -> None:
        self.db.rebalance()

    @rule(capture=st.sampled_from(["OLD_AND_NEW_VALUES", "NEW_VALUES", "NEW_ROW"]))
    def ddl(self, capture: str) -> None:
        """DDL between steps: the stream's value capture type changes, and a table the stream
        tracks (FOR ALL) is created, or the last one created is dropped."""
        statements = [f"ALTER CHANGE STREAM S SET OPTIONS ({self.options(capture)})"]
        if self.scratch_tables % 2:
            statements.append(f"DROP TABLE C{self.scratch_tables // 2}")
        else:
            name = f"C{self.scratch_tables // 2}"
            statements.append(f"CREATE TABLE {name} (K INT64 NOT NULL) PRIMARY KEY (K)")
        self.scratch_tables += 1
        self.db.execute_ddl(statements)

    @rule(index=st.integers(0, 100))
    def heartbeat(self, index: int) -> None:
        """Read a live partition with a fast heartbeat until one arrives, and remember its
        promise: nothing in this partition at or below it may show up later."""
        live = self.db.partitions("S")
        partition = live[index % len(live)]
        start = max(store_of(self.db).last_commit_ts(), partition.start_timestamp)
        request = ReadRequest(
            store_of(self.db).catalog().stream("S"), start, None, partition.token, 10_000
        )
        seen: set[int] = set()
        for record in ChangeStreamReader(store_of(self.db), request):
            if isinstance(record, HeartbeatRecord):
                self.heartbeats.append((partition.token, start, record.timestamp, seen))
                return
            if isinstance(record, changestream.DataChangeRecord):
                seen.add(record.commit_timestamp)

    @invariant()
    def table_matches_model(self) -> None:
        if not hasattr(self, "db"):
            return
        for table in ("A", "B"):
            width = KEY_WIDTH[table]
            actual = {tuple(row[:width]): row[width] for row in self.db.read(table)}
            assert actual == self.model.rows[table]

    def teardown(self) -> None:
        if not hasattr(self, "db"):
            return
        try:
            self.check_lineage()
        finally:
            self.close_writer()
            self.db.close()
            shutil.rmtree(self.dir, ignore_errors=True)

    def close_writer(self) -> None:
        """Nothing to close for the embedded variant: its writer is ``self.db``."""

    def open_file(self, path: str) -> changestream.EmbeddedDatabase:
        return changestream.open(path)

    def options(self, capture: str = "OLD_AND_NEW_VALUES") -> str:
        """The stream's options."""
        return f"value_capture_type = '{capture}'"

    def check_lineage(self) -> None:
        end = max(store_of(self.db).last_commit_ts(), self.start)  # no commit may follow an expiry
        reads = read_lineage(self.db, "S", self.start, end)
        by_token = {r.token: r for r in reads}
        secret = store_of(self.db).secret
        tables = store_of(self.db).catalog().tables
        returned: list[tuple[int, str, tuple[Any, ...], str]] = []
        replay = {table: dict(rows) for table, rows in self.replay_base.items()}
        ordered = []
        for read in reads:
            stamps = [r.commit_timestamp for r in read.records]
            assert stamps == sorted(stamps)  # (2)
            split = load_split(
                store_of(self.db).connection(), decode_token(secret, read.token).split_id
            )
            assert split is not None
            for parent in read.parents:  # (4)
                assert by_token[parent].end == read.start
                assert all(r.commit_timestamp < read.start for r in by_token[parent].records)
            for record in read.records:
                assert record.commit_timestamp >= read.start
                for mod in record.mods:
                    key = tuple(
                        mod.keys[c]
                        for c in COLUMNS[record.table_name][: KEY_WIDTH[record.table_name]]
                    )
                    encoded = encode_key(tables[record.table_name], key)
                    assert split.contains(encoded)  # (3)
                    returned.append(
                        (record.commit_timestamp, record.table_name, key, record.mod_type)
                    )
                    ordered.append(
                        (
                            record.commit_timestamp,
                            int(record.record_sequence),
                            record.table_name,
                            key,
                            record.mod_type,
                            mod.new_values,
                        )
                    )
        assert len(returned) == len(set(returned))  # (1) exactly once
        assert set(returned) == self.expected  # (1) every mod
        for _, _, table, key, kind, new_values in sorted(ordered, key=lambda o: o[:2]):
            if kind == "DELETE":
                del replay[table][key]
            else:
                replay[table][key] = new_values.get("V", replay[table].get(key))
        assert replay == self.model.rows  # (5)
        event(f"partitions read: {min(len(reads), 10)}{'+' if len(reads) >= 10 else ''}")
        event(f"heartbeats checked: {min(len(self.heartbeats), 3)}")
        for token, start, promised, seen in self.heartbeats:  # (6)
            read = by_token.get(token)
            if read is None:
                continue
            late = {
                r.commit_timestamp for r in read.records if start <= r.commit_timestamp <= promised
            }
            assert late <= seen, (promised, late - seen)


#: The second process of a burst: upserts its keys of table A ``rounds`` times, one row per
#: transaction, printing "<commit timestamp> <key> <value>" per commit.
WRITER_PROCESS = """
import sys
import changestream
from changestream.clock import parse_ts
path, first, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with changestream.open(path) as db:
    for value in range(rounds):
        for key in range(first, first + KEYS_PER_WRITER):
            with db.transaction() as tx:
                tx.insert_or_update("A", ["K", "V"], [[key, value]])
            print(parse_ts(tx.commit_timestamp), key, value, flush=True)
"""
KEYS_PER_WRITER = 3


class ConcurrentChangeStreamMachine(ChangeStreamMachine):
    """The machine plus bursts of concurrent writers: threads with their own connections and
    a second process, all committing at once. Each writer owns its keys (A keys from 1,000 up,
    out of the other rules' reach), so the model knows the outcome whatever the interleaving;
    every commit's timestamp is recorded by the writer that made it."""

    @rule(threads=st.integers(1, 3), rounds=st.integers(1, 3))
    def concurrent_burst(self, threads: int, rounds: int) -> None:
        bursts = getattr(self, "bursts", 0)
        self.bursts = bursts + 1
        base = 1_000 + 100 * bursts
        path = os.path.join(self.dir, "db.sqlite")
        commits: list[tuple[int, int, int]] = []  # (commit_ts, key, value)
        failures: list[BaseException] = []
        lock = threading.Lock()

        def write(first: int) -> None:
            try:
                with changestream.open(path) as own:
                    for value in range(rounds):
                        for key in range(first, first + KEYS_PER_WRITER):
                            with own.transaction() as tx:
                                tx.insert_or_update("A", ["K", "V"], [[key, value]])
                            assert tx.commit_timestamp is not None
                            with lock:
                                commits.append((parse_ts(tx.commit_timestamp), key, value))
            except BaseException as exc:
                failures.append(exc)

        code = WRITER_PROCESS.replace("KEYS_PER_WRITER", str(KEYS_PER_WRITER))
        process = subprocess.Popen(
            [sys.executable, "-c", code, path, str(base + 90), str(rounds)],
            stdout=subprocess.PIPE,
            text=True,
        )
        workers = [
            threading.Thread(target=write, args=(base + 10 * i,), daemon=True)
            for i in range(threads)
        ]
        for worker in workers:
            worker.start()
        out, _ = process.communicate(timeout=120)
        for worker in workers:
            worker.join(120)
        assert not failures and not any(w.is_alive() for w in workers), failures
        assert process.returncode == 0
        commits += [tuple(map(int, line.split())) for line in out.splitlines()]  # type: ignore[misc]
        assert len(commits) == (threads + 1) * rounds * KEYS_PER_WRITER
        for ts, key, value in sorted(commits):
            kind = "UPDATE" if (key,) in self.model.rows["A"] else "INSERT"
            self.expected.add((ts, "A", (key,), kind))
            self.model.rows["A"][(key,)] = value
        event(f"burst of {threads} threads and a process")


class RemoteChangeStreamMachine(ChangeStreamMachine):
    """The machine with every transaction committed through a server: ``connect(url)``."""

    @initialize()
    def open_database(self) -> None:
        super().open_database()
        self.served = contextlib.ExitStack()
        server = self.served.enter_context(serving({"db": self.db}))
        self.writer = self.served.enter_context(changestream.connect(f"{server.url}/db"))

    def close_writer(self) -> None:
        self.served.close()


class RetentionChangeStreamMachine(ChangeStreamMachine):
    """The machine with a one-hour retention period and a clock that can jump past it."""

    RETENTION_US = 3600 * 1_000_000

    def open_file(self, path: str) -> changestream.EmbeddedDatabase:
        self.offset = 0
        return changestream.open(path, clock=lambda: now_us() + self.offset)

    def options(self, capture: str = "OLD_AND_NEW_VALUES") -> str:
        return f"{super().options(capture)}, retention_period = '1h'"

    @rule()
    def expire(self) -> None:
        """Two hours pass: every change so far expires; reads start from now on."""
        first = store_of(self.db).catalog().stream("S").created_ts
        self.offset += 2 * self.RETENTION_US
        now = store_of(self.db).now()
        with pytest.raises(OutOfRange):
            self.db.read_change_stream("S", first)
        self.expected = {e for e in self.expected if e[0] > now - self.RETENTION_US}
        assert not self.expected
        self.start = now
        self.heartbeats.clear()
        # The log from now on, replayed over the tables as they are now, must rebuild them.
        self.replay_base = {table: dict(rows) for table, rows in self.model.rows.items()}


def _settings(examples: int, steps: int) -> settings:
    return settings(
        max_examples=200 if LONG else int(os.environ.get("CS_EXAMPLES", str(examples))),
        stateful_step_count=60 if LONG else steps,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )


ChangeStreamMachine.TestCase.settings = _settings(15, 25)
TestChangeStreamInvariants = ChangeStreamMachine.TestCase
ConcurrentChangeStreamMachine.TestCase.settings = _settings(8, 20)
TestConcurrentChangeStreamInvariants = ConcurrentChangeStreamMachine.TestCase
RemoteChangeStreamMachine.TestCase.settings = _settings(8, 20)
TestRemoteChangeStreamInvariants = RemoteChangeStreamMachine.TestCase
RetentionChangeStreamMachine.TestCase.settings = _settings(8, 20)
TestRetentionChangeStreamInvariants = RetentionChangeStreamMachine.TestCase
