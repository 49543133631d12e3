"""A replica's target file size: fitted to the table, kept when somebody else set it."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from changestream.datastream.events import CdcMod, Event, cdc_events
from changestream.spark.replica import SORT_KEY_COLUMN, UUID_COLUMN, DeltaReplica
from changestream.spark.replica_files import (
    AUTOMATIC_TARGET,
    LARGEST_TARGET,
    SMALLEST_TARGET,
    TARGET_FILE_SIZE,
    file_size_target,
    table_bytes,
)
from tests.datastream_support import table_of

KV = table_of("CREATE TABLE KV (K INT64 NOT NULL, V STRING(MAX)) PRIMARY KEY (K)")
MIB = 1 << 20


def inserts(start: int, keys: range, value: str) -> list[Event]:
    mods = [
        CdcMod(start + n, "t", "00000000", 0, "INSERT", {"K": str(n)}, {"V": value}, {})
        for n in keys
    ]
    return cdc_events("s", "DB1", KV, mods, start + keys.stop)


def noise_inserts(start: int, keys: range) -> list[Event]:
    """Inserts whose values do not compress: their files are about as big as their text."""
    mods = [
        CdcMod(
            start + n, "t", "00000000", 0, "INSERT", {"K": str(n)}, {"V": os.urandom(500).hex()}, {}
        )
        for n in keys
    ]
    return cdc_events("s", "DB1", KV, mods, start + keys.stop)


def properties(replica: DeltaReplica) -> dict[str, str]:
    return dict(DeltaTable(str(replica.path)).metadata().configuration)


@pytest.mark.parametrize(
    ("size", "target"),
    [
        (0, SMALLEST_TARGET),
        (16 * MIB, SMALLEST_TARGET),
        (16 * MIB + 16, 2 * MIB),
        (100 * MIB, 8 * MIB),
        (2048 * MIB, LARGEST_TARGET),
        (1 << 50, LARGEST_TARGET),
    ],
)
def test_the_target_is_a_sixteenth_of_the_table_as_a_power_of_two_within_bounds(
    size: int, target: int
) -> None:
    assert file_size_target(size) == target


def test_a_new_replica_writes_a_big_merge_into_several_files(tmp_path: Path) -> None:
    replica = DeltaReplica(tmp_path, "DB1", KV)
    replica.apply(inserts(1_000, range(60_000), "v" * 60))
    delta = DeltaTable(str(replica.path))
    assert properties(replica)[TARGET_FILE_SIZE] == str(SMALLEST_TARGET)
    assert properties(replica)[AUTOMATIC_TARGET] == str(SMALLEST_TARGET)
    assert len(delta.file_uris()) >= 3
    assert replica.read_rows() == [(n, "v" * 60) for n in range(60_000)]


def test_a_replica_that_grew_gets_a_bigger_target_and_compaction_packs_to_it(
    tmp_path: Path,
) -> None:
    replica = DeltaReplica(tmp_path, "DB1", KV)
    replica.ensure()
    for batch in range(4):  # about 36 MB of text that does not compress, in small files
        keys = range(9_000 * batch, 9_000 * (batch + 1))
        write_deltalake(
            str(replica.path), replica.source_rows(noise_inserts(1_000, keys)), mode="append"
        )
    grown = table_bytes(DeltaTable(str(replica.path)))
    assert grown > 16 * MIB
    rows = replica.read_rows()
    before = len(DeltaTable(str(replica.path)).file_uris())
    replica.maintain(vacuum_retention_hours=168)
    after = DeltaTable(str(replica.path))
    wanted = str(file_size_target(grown))
    assert int(wanted) > SMALLEST_TARGET
    assert properties(replica)[TARGET_FILE_SIZE] == wanted
    assert properties(replica)[AUTOMATIC_TARGET] == wanted
    # Packed into files of about the target: fewer, but not one (Delta's default, 100 MB).
    assert 1 < len(after.file_uris()) < before
    assert replica.read_rows() == rows


def test_a_target_somebody_else_set_is_kept(tmp_path: Path) -> None:
    replica = DeltaReplica(tmp_path, "DB1", KV)
    replica.apply(inserts(1_000, range(100), "a"))
    DeltaTable(str(replica.path)).alter.set_table_properties({TARGET_FILE_SIZE: str(5 * MIB)})
    replica.maintain(vacuum_retention_hours=168)
    DeltaReplica(tmp_path, "DB1", KV).apply(inserts(2_000, range(100, 200), "b"))
    assert properties(replica)[TARGET_FILE_SIZE] == str(5 * MIB)


def test_a_replica_made_before_targets_gets_one_when_opened(tmp_path: Path) -> None:
    old = tmp_path / "DB1_KV"
    write_deltalake(str(old), DeltaReplica(tmp_path, "DB1", KV).schema.empty_table())
    assert TARGET_FILE_SIZE not in DeltaTable(str(old)).metadata().configuration
    replica = DeltaReplica(tmp_path, "DB1", KV)
    replica.apply(inserts(1_000, range(10), "a"))
    assert properties(replica)[TARGET_FILE_SIZE] == str(SMALLEST_TARGET)
    assert replica.read_rows() == [(n, "a") for n in range(10)]


def test_files_are_snappy_compressed_keep_chunk_statistics_and_no_dictionary_for_unique_columns(
    tmp_path: Path,
) -> None:
    replica = DeltaReplica(tmp_path, "DB1", KV)
    replica.apply(inserts(1_000, range(2_000), "same"))
    delta = DeltaTable(str(replica.path))
    for uri in delta.file_uris():
        meta = pq.ParquetFile(uri).metadata.row_group(0)
        chunks = {meta.column(i).path_in_schema: meta.column(i) for i in range(meta.num_columns)}
        assert {chunk.compression for chunk in chunks.values()} == {"SNAPPY"}
        for unique in (SORT_KEY_COLUMN, UUID_COLUMN):
            assert not chunks[unique].has_dictionary_page
            assert chunks[unique].statistics.has_min_max
        assert chunks["V"].has_dictionary_page  # one value over and over: a dictionary pays
        assert not chunks["K"].has_column_index  # statistics per chunk, not per page
        assert chunks["K"].statistics.min == 0
    # Delta's file statistics, which MERGE prunes files by, are still there.
    stats = pa.table(delta.get_add_actions(flatten=True))
    assert stats["min.K"].to_pylist() and None not in stats["max.K"].to_pylist()
