"""Event files in a directory laid out like the seed's bucket: JSON lines or Avro.

A file lives at ``<root>/<object>/<yyyy>/<mm>/<dd>/<HH>/<MM>/<uuid>.jsonl|.avro``; the path time
is the ``read_timestamp`` of the file's first event (UTC), so a replayed batch whose events carry
the same read timestamps lands in the same directories.

A file holds events of one object and one schema (an Avro header has one schema). It is closed
once it reaches ``max_file_bytes`` — so it exceeds that by at most one event, or for Avro one
block (at most 64 KiB and an eighth of ``max_file_bytes``) — or when the next event was read
``max_file_seconds`` or more after the file's first event.

Every call writes whole files and returns only when they are durable: each is written under a
hidden temporary name (``.<name>.<random>.tmp``, skipped by Spark, pyarrow and Hadoop readers) in
its final directory, fsynced, renamed, and the directory fsynced. A reader never sees a partial
file, and no file stays open between calls, because a caller (a Spark micro-batch) treats its
events as delivered once the call returns. A crash can leave temporary files behind, never a
partial visible one.
"""

from __future__ import annotations

import gzip
import io
import os
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final, Protocol, cast

import fastavro
import orjson

from changestream.clock import to_datetime
from changestream.datastream._avro import avro_plan_of, event_dict, payload_converter
from changestream.datastream.events import Event
from changestream.datastream.layout import EXTENSIONS
from changestream.datastream.layout import event_files as event_files
from changestream.errors import InvalidArgument

FORMATS: Final = ("json", "avro")
DEFAULT_MAX_FILE_BYTES: Final = 50 * 1024 * 1024
DEFAULT_MAX_FILE_SECONDS: Final = 60.0
# Fixed so deterministic file names stay the same across processes and releases.
_FILE_NAMESPACE = uuid.UUID("0b7b7d2e-56a4-4c55-9b67-4a7c8e0f6f11")
_BUFFER_BYTES = 1024 * 1024
_AVRO_BLOCK_BYTES = 64 * 1024


class _Sink(Protocol):
    def write(self, event: Event) -> int:
        """Write one event; return the file's size so far."""

    def write_encoded(self, encoded: bytes) -> int:
        """Write one event already encoded; return the file's size so far."""

    def finish(self) -> None:
        """Write whatever is buffered (the file object stays open)."""


class _JsonSink:
    def __init__(self, fo: IO[bytes] | gzip.GzipFile) -> None:
        self._fo = fo
        self._size = 0

    def write(self, event: Event) -> int:
        line = orjson.dumps(event.to_json_dict(), option=orjson.OPT_APPEND_NEWLINE)
        return self.write_encoded(line)

    def write_encoded(self, line: bytes | memoryview) -> int:
        self._fo.write(line)
        self._size += len(line)
        return self._size

    def finish(self) -> None:
        return None


class _GzipJsonSink(_JsonSink):
    """JSON lines in one gzip member: members concatenate into a valid gzip file, so
    segments can be joined into a published file without recompressing."""

    def __init__(self, fo: IO[bytes]) -> None:
        self._gzip = gzip.GzipFile(fileobj=fo, mode="wb", mtime=0)
        super().__init__(self._gzip)

    def finish(self) -> None:
        self._gzip.close()  # writes the member's trailer; the file stays open


class _CountedFile:
    """Writes to ``fo`` and counts the bytes: what ``fo.tell()`` says, without the system
    call a buffered file's ``tell()`` makes (once per event, it was 6 % of an Avro task)."""

    def __init__(self, fo: IO[bytes]) -> None:
        self._fo = fo
        self.written = 0

    def write(self, data: bytes) -> int:
        self.written += len(data)
        return self._fo.write(data)

    def flush(self) -> None:
        self._fo.flush()

    def seekable(self) -> bool:
        return False  # a new file: fastavro must not read a header to append to


class _AvroSink:
    """Avro records encoded by the table's :class:`AvroPlan`, in blocks fastavro frames."""

    def __init__(self, fo: IO[bytes], event: Event, max_file_bytes: int) -> None:
        self._fo = _CountedFile(fo)
        plan = avro_plan_of(event)
        self._encode = plan.encode
        # A block is written once it holds this many bytes, so the bytes written so far lag
        # the true size by less than a block: cap the block at 1/8 of a file.
        self._block_bytes = max(1, min(_AVRO_BLOCK_BYTES, max_file_bytes // 8))
        self._records: list[bytes] = []
        self._pending = 0
        self._writer = fastavro.write.Writer(
            cast(IO[bytes], self._fo),
            plan.schema,
            metadata={
                "changestream.object": event.object,
                "changestream.schema_key": event.schema_key,
            },
        )

    def write(self, event: Event) -> int:
        return self.write_encoded(self._encode(event))

    def write_encoded(self, record: bytes) -> int:
        self._records.append(record)
        self._pending += len(record)
        if self._pending >= self._block_bytes:
            self._dump()
        return self._fo.written

    def _dump(self) -> None:
        if self._records:
            block = _EncodedBlock(len(self._records), io.BytesIO(b"".join(self._records)))
            self._writer.write_block(block)
            self._records, self._pending = [], 0

    def finish(self) -> None:
        self._dump()
        self._writer.flush()


@dataclass(frozen=True, slots=True)
class _EncodedBlock:
    """Records already encoded, as ``fastavro``'s ``Writer.write_block`` takes a block (the
    two attributes it reads of a ``fastavro.block_reader`` block)."""

    num_records: int
    bytes_: io.BytesIO


class EventFile:
    """A file being written under its temporary name."""

    def __init__(self, path: Path, format: str, first: Event, max_file_bytes: int) -> None:
        self.path = path
        self.schema_key = first.schema_key
        self.first_read_us = first.read_timestamp
        self.size = 0
        #: The events written so far.
        self.events = 0
        self.temp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
        self._fo = open(self.temp, "wb", buffering=_BUFFER_BYTES)  # noqa: SIM115 (closed in commit/abort)
        self._sink: _Sink
        if format == "json":
            self._sink = _JsonSink(self._fo)
        elif format == "json.gz":
            self._sink = _GzipJsonSink(self._fo)
        else:
            self._sink = _AvroSink(self._fo, first, max_file_bytes)

    def write(self, event: Event) -> None:
        self.size = self._sink.write(event)
        self.events += 1

    def write_lines(self, lines: bytes | memoryview, count: int) -> None:
        """Write ``count`` JSON lines at once (each with its newline) to a JSON file."""
        if not isinstance(self._sink, _JsonSink):
            raise InvalidArgument(f"{self.path.name} is not a JSON file: it takes no JSON lines")
        self.size = self._sink.write_encoded(lines)
        self.events += count

    def write_encoded(self, encoded: bytes) -> None:
        """Write an event already encoded in the file's format: a JSON line (newline
        included), or an Avro record of the file's schema."""
        self.size = self._sink.write_encoded(encoded)
        self.events += 1

    def commit(self) -> None:
        """Make the file durable and visible under its final name (directory synced later)."""
        self._sink.finish()
        self._fo.flush()
        os.fsync(self._fo.fileno())
        self._fo.close()
        os.replace(self.temp, self.path)

    def abort(self) -> None:
        self._fo.close()
        self.temp.unlink(missing_ok=True)


class EventFileWriter:
    """Writes events to files under ``root`` (see the module docstring for layout and rules)."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        format: str = "json",
        *,
        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
        max_file_seconds: float = DEFAULT_MAX_FILE_SECONDS,
    ) -> None:
        if format not in FORMATS:
            raise InvalidArgument(f"format must be one of {', '.join(FORMATS)}, got {format!r}")
        if max_file_bytes < 1:
            raise InvalidArgument(f"max_file_bytes must be at least 1, got {max_file_bytes}")
        if max_file_seconds <= 0:
            raise InvalidArgument(f"max_file_seconds must be positive, got {max_file_seconds}")
        self.root = Path(root)
        self.format = format
        self.max_file_bytes = max_file_bytes
        self.max_file_us = int(max_file_seconds * 1_000_000)

    def write(self, events: Iterable[Event]) -> list[Path]:
        """Write events in the order given, in files with random names; returns the files."""
        return self._write(events, batch_id=None)

    def write_batch(self, events: Iterable[Event], batch_id: int | str) -> list[Path]:
        """Write one micro-batch in files named UUID 5 of (object, batch id, file index).

        Events are written per object in ``sort_keys`` order (then by uuid), so replaying the
        same batch — the same events, in any order, with the same read timestamps — writes the
        same files under the same names, replacing them instead of adding duplicates.
        """
        ordered = sorted(events, key=lambda e: (e.object, e.sort_keys, e.uuid))
        return self._write(ordered, batch_id=str(batch_id))

    def _write(self, events: Iterable[Event], batch_id: str | None) -> list[Path]:
        by_object: dict[str, list[Event]] = {}
        for event in events:
            by_object.setdefault(event.object, []).append(event)
        written: list[Path] = []
        to_sync: set[Path] = set()
        current: EventFile | None = None
        try:
            for object_events in by_object.values():
                index = 0
                for event in object_events:
                    if current is not None and self._must_rotate(current, event):
                        current.commit()
                        written.append(current.path)
                        current = None
                    if current is None:
                        path = self._path(event, batch_id, index)
                        to_sync.update(_make_directories(path.parent))
                        current = EventFile(path, self.format, event, self.max_file_bytes)
                        index += 1
                    current.write(event)
                if current is not None:
                    current.commit()
                    written.append(current.path)
                    current = None
        except BaseException:
            if current is not None:
                current.abort()
            raise
        sync_directories(to_sync | {path.parent for path in written})
        return written

    def _must_rotate(self, file: EventFile, event: Event) -> bool:
        return (
            file.size >= self.max_file_bytes
            or event.schema_key != file.schema_key
            or event.read_timestamp - file.first_read_us >= self.max_file_us
        )

    def _path(self, first: Event, batch_id: str | None, index: int) -> Path:
        if batch_id is None:
            name = uuid.uuid4()
        else:
            name = uuid.uuid5(
                _FILE_NAMESPACE, orjson.dumps([first.object, batch_id, index]).decode()
            )
        moment = to_datetime(first.read_timestamp)
        return self.root.joinpath(
            first.object, moment.strftime("%Y/%m/%d/%H/%M"), f"{name}{EXTENSIONS[self.format]}"
        )


def _make_directories(directory: Path) -> list[Path]:
    """Create ``directory`` and its missing ancestors; return the directories whose entries
    changed (the parents of those created)."""
    missing: list[Path] = []
    while not directory.is_dir():
        missing.append(directory)
        directory = directory.parent
    for created in reversed(missing):
        created.mkdir(exist_ok=True)
    return [created.parent for created in missing]


def sync_directories(directories: Iterable[Path]) -> None:
    # A rename or mkdir is durable only once its directory is: without this a crash could lose
    # a file whose batch the caller already counted as delivered.
    for directory in directories:
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def read_events(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The events of a ``.jsonl``, ``.jsonl.gz`` or ``.avro`` file, each in
    :meth:`Event.to_json_dict` form."""
    path = Path(path)
    if path.suffix == ".jsonl" or path.name.endswith(".jsonl.gz"):
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rb") as fo:
            return [orjson.loads(line) for line in fo if line.strip()]
    if path.suffix == ".avro":
        with open(path, "rb") as fo:
            reader = fastavro.reader(fo)
            convert = payload_converter(cast(dict[str, Any], reader.writer_schema))
            return [event_dict(cast(dict[str, Any], record), convert) for record in reader]
    raise InvalidArgument(f"event files end in .jsonl, .jsonl.gz or .avro, got {path.name!r}")
