"""Event files written in segments by many writers and published on rotation.

The pipeline's Spark tasks each write the events of one micro-batch (or backfill chunk) to
*segments*: hidden files in a *lane* (one object, one kind of read, one schema) under
``<root>/_changestream/<incarnation>/segments/``. A segment's name holds the batch, the task and
the part, so a replayed batch rewrites the same segments instead of adding new ones.

Segments pile up across micro-batches until their lane is due — they hold ``max_file_bytes``,
or the oldest was written ``max_file_seconds`` ago, or the pipeline stops — and then they are
*published*: concatenated, in name order, into visible event files (at most ``max_file_bytes``
each, plus one segment) under the layout of :mod:`changestream.datastream.files`; a segment of
a quarter of a file or more becomes a file of its own, renamed rather than copied (a copy
costs what writing the segment did: 4 ms a MB on a 2-core VM). So a slow trickle makes about
one file per object per rotation interval, not one per micro-batch.

Publishing is crash-safe: the lane first records its intent (the segments and the file name,
which derives from the first segment's name), writes the file under a temporary name, fsyncs
and renames it, records the last published CDC segment, deletes the segments and then the
intent. After a crash the intent is carried out again: the file is rewritten from its segments
while they all exist, and otherwise (it was renamed before any was deleted) only the cleanup
is finished. CDC segments of a batch replayed after its segments were published sort at or
below the recorded last one and are dropped, so no event is published twice.
"""

from __future__ import annotations

import bisect
import errno
import os
import shutil
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Final

import fastavro
import orjson

from changestream.clock import to_datetime
from changestream.datastream._avro import avro_schema
from changestream.datastream.events import Event
from changestream.datastream.files import EventFile, sync_directories
from changestream.datastream.layout import EXTENSIONS

if TYPE_CHECKING:
    import pyarrow as pa

CDC_LANE: Final = "cdc"
BACKFILL_LANE: Final = "backfill"
SEGMENT_SUFFIX: Final = ".seg"
_INTENT = "_publishing.json"
#: A lane's Avro schema (and its schema key), published beside its JSON files when asked.
_SCHEMA = "_schema.json"
_LEDGER = "_published.json"
_NAMESPACE = uuid.UUID("5f0c62c4-9d0e-4b7a-8f59-5d9e4f0a7c31")


@dataclass(frozen=True, slots=True)
class Segment:
    """One segment file: ``seq`` (micro-batch id or backfill chunk), ``task`` and ``part``
    order it; ``read_timestamp`` (µs) is its first event's, and dates the published file."""

    path: Path
    seq: int
    task: int
    part: int
    read_timestamp: int

    @staticmethod
    def parse(path: Path) -> Segment:
        seq, task, part, read_us = path.name.split(".")[0].split("-")
        return Segment(path, int(seq), int(task), int(part), int(read_us))


def segment_name(seq: int, task: int, part: int, read_timestamp: int, format: str) -> str:
    """The file name of a segment: sorts by (seq, task, part)."""
    return f"{seq:012d}-{task:05d}-{part:04d}-{read_timestamp:016d}{EXTENSIONS[format]}.seg"


def lane_directory(root: Path, obj: str, lane: str, schema_key: str) -> Path:
    """Where the segments of ``obj``'s ``lane`` with schema ``schema_key`` go."""
    return root / obj / f"{lane}-{schema_key}"


class SegmentWriter:
    """Writes one task's events to segments under ``root`` (see the module docstring).

    Events are grouped by lane; a lane's segment is closed and a new part started once it
    reaches ``max_file_bytes``. :meth:`close` makes every segment durable and returns them.
    """

    def __init__(
        self,
        root: Path,
        format: str,
        max_file_bytes: int,
        lane: str,
        seq: int,
        task: int,
        schema_files: bool = False,
    ) -> None:
        self.root, self.format, self.max_file_bytes = root, format, max_file_bytes
        self.schema_files = schema_files
        self.lane, self.seq, self.task = lane, seq, task
        self._open: dict[tuple[str, str], EventFile] = {}
        self._parts: dict[tuple[str, str], int] = {}
        self._done: list[tuple[str, Path, int]] = []

    def write(self, events: Iterable[Event]) -> None:
        for event in events:
            lane = (event.object, event.schema_key)
            file = self._open.get(lane) or self._start(event)
            file.write(event)
            if file.size >= self.max_file_bytes:
                self._finish(lane)

    def write_encoded(self, first: Event, encoded: Iterable[bytes]) -> None:
        """Write events of one lane already encoded in the writer's format (see
        :meth:`EventFile.write_encoded`): ``first`` is the first of them, which says the
        lane."""
        lane = (first.object, first.schema_key)
        file = self._open.get(lane)
        for record in encoded:
            if file is None:
                file = self._start(first)
            file.write_encoded(record)
            if file.size >= self.max_file_bytes:
                self._finish(lane)
                file = None

    def write_lines(self, first: Event, lines: pa.Array) -> None:
        """Write JSON lines of one lane given as one Arrow ``string`` or ``binary`` array
        without nulls (each line with its newline; ``first`` the first event, which says the
        lane), as :meth:`write_encoded` would write them one by one, in as few writes as the
        files' sizes allow."""
        lane = (first.object, first.schema_key)
        count = len(lines)
        if not count:
            return
        _, offsets_buffer, data_buffer = lines.buffers()
        at = lines.offset
        offsets = memoryview(offsets_buffer).cast("i")[at : at + count + 1]
        data = memoryview(data_buffer)
        start = 0
        while start < count:
            file = self._open.get(lane) or self._start(first)
            # A file takes lines until it holds max_file_bytes: the line that reaches it is its
            # last one.
            goal = offsets[start] + self.max_file_bytes - file.size
            end = min(max(bisect.bisect_left(offsets, goal), start + 1), count)
            file.write_lines(data[offsets[start] : offsets[end]], end - start)
            if file.size >= self.max_file_bytes:
                self._finish(lane)
            start = end

    def _start(self, event: Event) -> EventFile:
        lane = (event.object, event.schema_key)
        part = self._parts.get(lane, 0)
        self._parts[lane] = part + 1
        directory = lane_directory(self.root, event.object, self.lane, event.schema_key)
        directory.mkdir(parents=True, exist_ok=True)
        if self.schema_files and not (directory / _SCHEMA).exists():
            flavor = event.source_metadata.flavor
            schema = {"schema_key": event.schema_key, "schema": avro_schema(event.table, flavor)}
            _write_json(directory / _SCHEMA, schema)
        name = segment_name(self.seq, self.task, part, event.read_timestamp, self.format)
        started = EventFile(directory / name, self.format, event, self.max_file_bytes)
        self._open[lane] = started
        return started

    def _finish(self, lane: tuple[str, str]) -> None:
        file = self._open.pop(lane)
        file.commit()
        self._done.append((lane[0], file.path, file.events))

    def close(self) -> list[tuple[str, Path, int]]:
        """Commit every open segment; returns (object, segment path, events) of each."""
        for lane in list(self._open):
            self._finish(lane)
        sync_directories({path.parent for _, path, _ in self._done})
        return self._done

    def abort(self) -> None:
        for file in self._open.values():
            file.abort()
        self._open.clear()


@dataclass(frozen=True, slots=True)
class Lane:
    """A lane directory with its pending segments, in name order."""

    directory: Path
    obj: str
    segments: tuple[Segment, ...]

    @property
    def size(self) -> int:
        return sum(s.path.stat().st_size for s in self.segments)


def pending_lanes(root: Path) -> Iterator[Lane]:
    """Every lane under ``root`` with its segments (CDC segments already published dropped)."""
    if not root.is_dir():
        return
    for obj_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        for directory in sorted(p for p in obj_dir.iterdir() if p.is_dir()):
            segments = _pending(directory)
            if segments or (directory / _INTENT).exists():
                yield Lane(directory, obj_dir.name, tuple(segments))


def due(lane: Lane, max_file_bytes: int, max_file_seconds: float, now: float) -> bool:
    """Whether ``lane`` should be published now."""
    if (lane.directory / _INTENT).exists():
        return True
    if not lane.segments:
        return False
    oldest = min(s.path.stat().st_mtime for s in lane.segments)
    return now - oldest >= max_file_seconds or lane.size >= max_file_bytes


def publish_lane(
    directory: Path, destination: Path, incarnation: str, format: str, max_file_bytes: int
) -> list[Path]:
    """Publish every pending segment of the lane at ``directory`` into event files under
    ``destination``; returns the files written."""
    finish_intent(directory, destination)
    _publish_schema(directory, destination)
    written: list[Path] = []
    for group in _groups(_pending(directory), max_file_bytes):
        first = group[0]
        name = uuid.uuid5(_NAMESPACE, orjson.dumps([incarnation, str(first.path)]).decode())
        moment = to_datetime(first.read_timestamp).strftime("%Y/%m/%d/%H/%M")
        obj = directory.parent.name
        target = destination / obj / moment / f"{name}{EXTENSIONS[format]}"
        intent = {"file": str(target), "segments": [s.path.name for s in group]}
        _write_json(directory / _INTENT, intent)
        finish_intent(directory, destination)
        written.append(target)
    return written


def _publish_schema(directory: Path, destination: Path) -> None:
    """The lane's schema file, once, as ``<object>/_schemas/<schema_key>.avsc`` (a name the
    schema key fixes, so lanes and replays of the same schema write the same file)."""
    if not (directory / _SCHEMA).exists():
        return
    found = orjson.loads((directory / _SCHEMA).read_bytes())
    target = destination / directory.parent.name / "_schemas" / f"{found['schema_key']}.avsc"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        _write_json(target, found["schema"])


def finish_intent(directory: Path, destination: Path) -> None:
    """Carry out a recorded publish (see the module docstring); nothing when there is none."""
    intent_path = directory / _INTENT
    if not intent_path.exists():
        return
    intent = orjson.loads(intent_path.read_bytes())
    target = Path(intent["file"])
    paths = [directory / name for name in intent["segments"]]
    if all(p.exists() for p in paths):
        _publish_file(paths, target)
    if _is_cdc(directory):
        _write_json(directory / _LEDGER, {"last": max(p.name for p in paths)})
    for path in paths:
        path.unlink(missing_ok=True)
    intent_path.unlink()
    sync_directories({directory})


def _is_cdc(directory: Path) -> bool:
    return directory.name.split("-", 1)[0] == CDC_LANE


def _pending(directory: Path) -> list[Segment]:
    """The lane's segments not yet published, in name order; segments a replayed CDC batch
    wrote again after its first copies were published are deleted."""
    last = _ledger(directory) if _is_cdc(directory) else None
    segments = []
    for path in sorted(directory.glob(f"*{SEGMENT_SUFFIX}")):
        if last is not None and path.name <= last:
            path.unlink(missing_ok=True)
            continue
        segments.append(Segment.parse(path))
    return segments


def _groups(segments: list[Segment], max_file_bytes: int) -> Iterator[list[Segment]]:
    """Runs of segments to concatenate into one file each; a segment of a quarter of a file
    or more is a file of its own, so it can be published by a rename instead of a copy."""
    group: list[Segment] = []
    size = 0
    for segment in segments:
        segment_size = segment.path.stat().st_size
        alone = segment_size * 4 >= max_file_bytes
        if group and (alone or size >= max_file_bytes):
            yield group
            group, size = [], 0
        group.append(segment)
        size += segment_size
        if alone:
            yield group
            group, size = [], 0
    if group:
        yield group


def _publish_file(paths: list[Path], target: Path) -> None:
    """Write ``target`` from the segments at ``paths``: a lone segment (already durable) is
    renamed, several are concatenated."""
    if len(paths) == 1:
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.replace(paths[0], target)
        except OSError as exc:
            if exc.errno != errno.EXDEV:  # elsewhere than the segments: copy instead
                raise
        else:
            sync_directories({target.parent, paths[0].parent})
            return
    _concatenate(paths, target)


def _concatenate(paths: list[Path], target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    temp = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
    try:
        with open(temp, "wb") as out:
            if target.suffix == ".avro":
                _concatenate_avro(paths, out)
            else:
                for path in paths:
                    with open(path, "rb") as segment:
                        shutil.copyfileobj(segment, out, 1024 * 1024)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    sync_directories({target.parent})


def _concatenate_avro(paths: list[Path], out: BinaryIO) -> None:
    # Blocks are copied as they are (no record is decoded): every segment of a lane has the
    # same schema, and the writer re-frames each block with its own sync marker.
    writer: fastavro.write.Writer | None = None
    for path in paths:
        with open(path, "rb") as segment:
            reader = fastavro.block_reader(segment)
            if writer is None:
                writer = fastavro.write.Writer(
                    out,
                    reader.writer_schema,
                    codec=reader.codec,
                    metadata={
                        k: v for k, v in reader.metadata.items() if not k.startswith("avro.")
                    },
                )
            for block in reader:
                writer.write_block(block)
    if writer is not None:
        writer.flush()


def _ledger(directory: Path) -> str | None:
    path = directory / _LEDGER
    if not path.exists():
        return None
    last: str = orjson.loads(path.read_bytes())["last"]
    return last


def _write_json(path: Path, data: object) -> None:
    temp = path.with_name(f".{path.name}.tmp")
    with open(temp, "wb") as out:
        out.write(orjson.dumps(data))
        out.flush()
        os.fsync(out.fileno())
    os.replace(temp, path)
    sync_directories({path.parent})
