"""Segments: what tasks write, how a lane is grouped into files on publish (big segments
renamed, small ones concatenated), and how a publish cut short by a crash is finished."""

from __future__ import annotations

import gzip
from pathlib import Path

import orjson
import pyarrow as pa
import pytest

from changestream.datastream.files import event_files, read_events
from changestream.datastream.layout import EXTENSIONS
from changestream.datastream.segments import (
    CDC_LANE,
    SegmentWriter,
    finish_intent,
    pending_lanes,
    publish_lane,
)
from tests.test_event_files import sample_events

FORMATS = ["json", "json.gz", "avro"]


def write_segments(root: Path, format: str, batches: list[int], per_batch: int, cap: int) -> None:
    """One task's segments per batch id in ``batches``, ``per_batch`` events each."""
    for seq in batches:
        writer = SegmentWriter(root, format, cap, CDC_LANE, seq, 0)
        writer.write(sample_events(per_batch, read_us=seq * 1_000_000))
        writer.close()


def lane_dir(root: Path) -> Path:
    (lane,) = pending_lanes(root)
    return lane.directory


def uuids(destination: Path) -> list[str]:
    return [e["uuid"] for f in event_files(destination) for e in read_events(f)]


def expected_uuids(batches: list[int], per_batch: int) -> list[str]:
    return [e.uuid for seq in batches for e in sample_events(per_batch, seq * 1_000_000)]


@pytest.mark.parametrize("format", FORMATS)
def test_small_segments_are_concatenated_and_big_ones_renamed(tmp_path: Path, format: str) -> None:
    segments, destination = tmp_path / "segments", tmp_path / "out"
    write_segments(segments, format, [1, 2, 3], per_batch=5, cap=10**6)
    write_segments(segments, format, [4], per_batch=400, cap=10**6)
    directory = lane_dir(segments)
    big = max(directory.glob("*.seg"), key=lambda p: p.stat().st_size)
    cap = big.stat().st_size + 1  # the big segment is over a quarter of a file, the small ones not
    big_inode = big.stat().st_ino

    files = publish_lane(directory, destination, "inc", format, cap)

    assert len(files) == 2
    assert files[1].stat().st_ino == big_inode  # renamed, not copied
    assert [len(read_events(f)) for f in files] == [15, 400]
    assert sorted(uuids(destination)) == sorted(
        expected_uuids([1, 2, 3], 5) + expected_uuids([4], 400)
    )
    assert list(directory.glob("*.seg")) == []
    assert not (directory / "_publishing.json").exists()


@pytest.mark.parametrize("format", FORMATS)
def test_a_publish_cut_short_is_finished_once(tmp_path: Path, format: str) -> None:
    segments, destination = tmp_path / "segments", tmp_path / "out"
    write_segments(segments, format, [1], per_batch=50, cap=10**6)
    directory = lane_dir(segments)
    (segment,) = directory.glob("*.seg")
    target = destination / "obj" / f"file{EXTENSIONS[format]}"
    # The crash came after the rename of a lone segment and before the cleanup.
    (directory / "_publishing.json").write_bytes(
        orjson.dumps({"file": str(target), "segments": [segment.name]})
    )
    target.parent.mkdir(parents=True)
    segment.rename(target)

    finish_intent(directory, destination)

    assert not (directory / "_publishing.json").exists()
    assert [e["uuid"] for e in read_events(target)] == expected_uuids([1], 50)
    # A replay of the published batch writes its segment again: it is dropped, not published.
    write_segments(segments, format, [1], per_batch=50, cap=10**6)
    assert publish_lane(directory, destination, "inc", format, 10**6) == []
    assert list(directory.glob("*.seg")) == []


def test_encoded_lines_fill_a_segment_up_to_the_one_that_reaches_its_cap(tmp_path: Path) -> None:
    """Encoded lines, however many a call hands in, fill a segment up to the line that brings
    it to its cap (exactly to the cap, too), then the next segment begins."""
    events = sample_events(8)
    lines = [orjson.dumps({"uuid": e.uuid}, option=orjson.OPT_APPEND_NEWLINE) for e in events]
    width = len(lines[0])
    assert all(len(line) == width for line in lines)
    writer = SegmentWriter(tmp_path, "json", 3 * width, CDC_LANE, 1, 0)
    writer.write_encoded(events[0], lines[:2])
    writer.write_encoded(events[0], lines[2:])
    written = writer.close()
    assert [n for _, _, n in written] == [3, 3, 2]
    assert [line for _, path, _ in written for line in path.read_bytes().splitlines(True)] == lines


@pytest.mark.parametrize("format", ["json", "json.gz"])
@pytest.mark.parametrize("cap", [1, 700, 5_000, 10**6])
def test_lines_written_at_once_make_the_segments_written_one_by_one(
    tmp_path: Path, format: str, cap: int
) -> None:
    """``write_lines`` cuts files where ``write_encoded`` does: after the line that brings a
    file to its cap (a line longer than the cap is a file of its own)."""
    events = sample_events(40, read_us=1_000_000)
    lines = [orjson.dumps(e.to_json_dict(), option=orjson.OPT_APPEND_NEWLINE) for e in events]
    contents = []
    for how, root in (("one by one", tmp_path / "a"), ("at once", tmp_path / "b")):
        writer = SegmentWriter(root, format, cap, CDC_LANE, 1, 0)
        if how == "at once":
            writer.write_lines(events[0], pa.array(lines[:25], pa.binary()))
            writer.write_lines(events[0], pa.array([], pa.string()))
            writer.write_lines(events[0], pa.array([line.decode() for line in lines[25:]]))
        else:
            writer.write_encoded(events[0], lines)
        written = writer.close()
        contents.append([(n, _uncompressed(p)) for _, p, n in written])
    assert contents[0] == contents[1]
    assert b"".join(data for _, data in contents[0]) == b"".join(lines)
    files = [data for _, data in contents[0]]
    assert len(files) == {1: 40, 10**6: 1}.get(cap, len(files))
    assert 1 <= len(files) <= 40
    for data in files[:-1]:  # each full file: its last line took it to the cap
        assert len(data) >= cap > len(data) - len(data.splitlines(keepends=True)[-1])


def _uncompressed(path: Path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if path.name.endswith(".gz.seg") else data
