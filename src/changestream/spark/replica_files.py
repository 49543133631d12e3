"""How a replica's data files are written: their size (Delta's ``delta.targetFileSize``, chosen
for the table) and their Parquet encoding.

A replica is kept by a MERGE per micro-batch, and deltalake's MERGE rewrites every file that
holds a changed key (copy on write), so how the files are written is most of a live
micro-batch's MERGE.

Size. With the whole table in one file, a batch of 5,000 random keys into 170,000 rows took
310–516 ms; with the same rows in 10 files of about 450 KB, 68–71 ms, and in 24 files, 50–63
ms (deltalake 1.6, 2 cores, six short columns). A batch whose keys are close together (new
rows, recent ones) also leaves the files of other keys alone. Without a target,
deltalake writes files of up to 100 MB and compaction packs them that big. So each replica
gets a target of about a sixteenth of its size, between 1 MiB and 128 MiB (a power of two, so
it changes only when the table doubles or halves): small tables stay in enough files for fast
MERGEs, big ones in files large enough to read fast. The target is looked at when the
pipeline first opens the replica and at each compaction (see
:meth:`~changestream.spark.replica.DeltaReplica.maintain`). A target somebody else set on the
table (``ALTER TABLE ... SET TBLPROPERTIES``) is kept: the automatic one is recorded beside
it, and only a target equal to that record is changed.

Encoding (:func:`writer_properties`). The sort key and uuid columns differ on every row, so
dictionary encoding them is work thrown away; and statistics are kept per column chunk (which
is what Delta's file statistics, and so MERGE's file pruning, come from), not per page. On
the pipeline benchmark's replica (170,000 rows) a 5,000-row MERGE took 141–183 ms with
deltalake's defaults and 100–123 ms written this way. The files are compressed with Snappy,
as Spark writes Parquet by default (with the writer properties above and no codec, deltalake
wrote them uncompressed): a 5,000-key MERGE into 170,000 rows took 93–114 ms against 91–271
uncompressed and 97–127 with Zstandard, and the table, with its old versions, took 85 MB of
disk against 214 (41 with Zstandard).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import ColumnProperties, DeltaTable, WriterProperties

TARGET_FILE_SIZE: Final = "delta.targetFileSize"
#: The target this module last set; a different ``delta.targetFileSize`` was set by someone
#: else and is left alone.
AUTOMATIC_TARGET: Final = "changestream.automaticTargetFileSize"
SMALLEST_TARGET: Final = 1 << 20
LARGEST_TARGET: Final = 128 << 20
#: About how many files the target keeps a table in, between the two bounds.
FILES_PER_TABLE: Final = 16
#: The replica files' codec: Spark's default for Parquet.
COMPRESSION: Final = "SNAPPY"


def writer_properties(unique_columns: Iterable[str]) -> WriterProperties:
    """How a replica's Parquet files are written: compressed with :data:`COMPRESSION`,
    statistics per column chunk, and no dictionary for ``unique_columns``, whose values
    differ on every row."""
    unique = ColumnProperties(dictionary_enabled=False, statistics_enabled="CHUNK")
    return WriterProperties(
        compression=COMPRESSION,
        default_column_properties=ColumnProperties(statistics_enabled="CHUNK"),
        column_properties=dict.fromkeys(unique_columns, unique),
    )


def file_size_target(table_bytes: int) -> int:
    """The automatic target file size of a table of ``table_bytes``: the power of two nearest
    above a :data:`FILES_PER_TABLE`-th of it, within [:data:`SMALLEST_TARGET`,
    :data:`LARGEST_TARGET`]."""
    share = max(1, table_bytes // FILES_PER_TABLE)
    return min(LARGEST_TARGET, max(SMALLEST_TARGET, 1 << (share - 1).bit_length()))


def new_table_properties() -> dict[str, str]:
    """The file-size properties of a new (empty) replica (pass ``raise_if_key_not_exists=False``
    to ``DeltaTable.create``: Delta does not know the record's key)."""
    target = str(SMALLEST_TARGET)
    return {TARGET_FILE_SIZE: target, AUTOMATIC_TARGET: target}


def table_bytes(delta: DeltaTable) -> int:
    """The bytes of the table's current data files."""
    sizes = pa.table(delta.get_add_actions(flatten=True))["size_bytes"]
    return int(pc.sum(sizes).as_py() or 0)


def size_files(delta: DeltaTable) -> int | None:
    """Set the table's target file size to :func:`file_size_target` of its size, unless
    somebody else set one; returns the target set, or None when it was right already or is
    not this module's to change."""
    configuration = delta.metadata().configuration
    current = configuration.get(TARGET_FILE_SIZE)
    if current is not None and current != configuration.get(AUTOMATIC_TARGET):
        return None
    target = file_size_target(table_bytes(delta))
    if current == str(target):
        return None
    delta.alter.set_table_properties(
        {TARGET_FILE_SIZE: str(target), AUTOMATIC_TARGET: str(target)},
        raise_if_not_exists=False,
    )
    return target
