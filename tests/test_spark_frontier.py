"""The streaming frontier over a random partition lineage (pure, no Spark)."""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from changestream.spark.frontier import Frontier, ReadRange, advance, ranges
from changestream.spark.planning import MIN_CUT_US, group


@dataclass
class Part:
    token: str
    start_timestamp: int
    end_timestamp: int | None = None
    parent_tokens: tuple[str, ...] = ()
    child_tokens: tuple[str, ...] = field(default_factory=tuple)


def _history(seed: int, steps: int) -> tuple[dict[str, Part], list[tuple[int, str]]]:
    """A lineage of splits and merges over ``steps`` timestamps, and records (ts, token)."""
    rng = random.Random(seed)
    parts = {"p0": Part("p0", 1)}
    live = ["p0"]  # in key order
    records: list[tuple[int, str]] = []
    for ts in range(1, steps + 1):
        roll = rng.random()
        if roll < 0.1:
            i = rng.randrange(len(live))
            parent = parts[live[i]]
            a, b = f"p{len(parts)}", f"p{len(parts) + 1}"
            parts[a] = Part(a, ts, parent_tokens=(parent.token,))
            parts[b] = Part(b, ts, parent_tokens=(parent.token,))
            parent.end_timestamp, parent.child_tokens = ts, (a, b)
            live[i : i + 1] = [a, b]
        elif roll < 0.18 and len(live) > 1:
            i = rng.randrange(len(live) - 1)
            left, right = parts[live[i]], parts[live[i + 1]]
            child = f"p{len(parts)}"
            parts[child] = Part(child, ts, parent_tokens=(left.token, right.token))
            for parent in (left, right):
                parent.end_timestamp, parent.child_tokens = ts, (child,)
            live[i : i + 2] = [child]
        else:
            for token in rng.sample(live, rng.randint(1, len(live))):
                records.append((ts, token))
    return parts, records


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), cuts=st.lists(st.integers(0, 12), min_size=1, max_size=30))
def test_batches_read_every_record_once_and_children_after_parents(
    seed: int, cuts: list[int]
) -> None:
    parts, records = _history(seed, steps=120)
    start_ts = 1 + cuts[0]
    live_at_start = [
        p.token
        for p in parts.values()
        if p.start_timestamp <= start_ts and (p.end_timestamp is None or p.end_timestamp > start_ts)
    ]
    frontier = Frontier.initial(start_ts, live_at_start)
    read: list[tuple[int, str]] = []
    first_batch: dict[str, int] = {}
    last_batch: dict[str, int] = {}
    until = frontier.timestamp
    # The last batches only admit children: the frontier stands still at the end.
    for batch, step in enumerate([*cuts[1:], 200, *[0] * 60]):
        until += step
        end = advance(frontier, parts, until)
        # Replaying from the same offsets plans the same reads.
        assert ranges(frontier, end) == ranges(
            Frontier.from_offset(frontier.to_offset()), Frontier.from_offset(end.to_offset())
        )
        for r in ranges(frontier, end):
            first_batch.setdefault(r.token, batch)
            last_batch[r.token] = batch
            read.extend(
                (ts, tok) for ts, tok in records if tok == r.token and r.start <= ts <= r.end
            )
        frontier = end
        # The watermark promises every record at or below it has been read.
        assert {r for r in records if start_ts <= r[0] <= end.watermark} <= set(read)
    wanted = sorted(r for r in records if r[0] >= start_ts)
    assert sorted(read) == wanted
    for token, batch in first_batch.items():
        for parent in parts[token].parent_tokens:
            if parent in last_batch:
                # A child's first batch is the one reading its parents' last records, or later.
                assert last_batch[parent] <= batch, "a child is read after its parents ended"


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_every_generation_ending_inside_a_batch_is_admitted_in_that_batch(seed: int) -> None:
    parts, records = _history(seed, steps=400)
    roots = [p.token for p in parts.values() if p.start_timestamp == 1]
    frontier = Frontier.initial(1, roots)
    end = advance(frontier, parts, 401)
    reads = ranges(frontier, end)
    # One batch reads the whole lineage: no partition waits for a later batch.
    assert end.ended == {} and end.watermark == 401
    assert {r.token for r in reads} == set(parts)
    read = sorted(
        (ts, tok) for r in reads for ts, tok in records if tok == r.token and r.start <= ts <= r.end
    )
    assert read == sorted(records)
    # Nothing is left for the next batch.
    assert ranges(end, advance(end, parts, 401)) == []


def test_a_stored_offset_of_another_version_is_refused() -> None:
    import pytest

    from changestream.errors import InvalidArgument

    offset = Frontier.initial(5, ["a"]).to_offset()
    offset["version"] = 99
    with pytest.raises(InvalidArgument, match="new checkpoint"):
        Frontier.from_offset(offset)


def test_group_cuts_ranges_by_time_to_fill_every_task() -> None:
    span = 20 * MIN_CUT_US
    reads = [ReadRange("a", 10, 10 + span - 1), ReadRange("b", 5, 5)]
    groups = group(reads, 4)
    assert len(groups) == 4
    pieces = sorted((r for g in groups for r in g), key=lambda r: (r.token, r.start))
    # Every timestamp of every partition is read by exactly one piece.
    assert [r.token for r in pieces] == ["a", "a", "a", "b"]
    assert pieces[0].start == 10 and pieces[2].end == 10 + span - 1
    a_pieces = pieces[:3]
    assert all(left.end + 1 == right.start for left, right in itertools.pairwise(a_pieces))
    assert pieces[3] == ReadRange("b", 5, 5)
    assert group(reads, 4) == groups  # planning stays a pure function
    assert group([ReadRange("c", 7, 7)], 4) == [[ReadRange("c", 7, 7)]]  # nothing to cut
    short = ReadRange("d", 0, MIN_CUT_US - 2)  # a live micro-batch: not worth cutting
    assert group([short], 4) == [[short]]
    assert group([], 4) == []
