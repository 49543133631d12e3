"""The tour's query workflow: the initial query, then each partition's query, children only
once all their parents have finished (:func:`changestream.parents_finished`), and a merge."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from rich.text import Text

from changestream import (
    ChangeRecord,
    ChildPartitionsRecord,
    DataChangeRecord,
    parents_finished,
)
from changestream.demo.bank import (
    STREAM,
    TABLE,
    TRANSFER_TAG,
    WORKFLOW_HEARTBEAT_MS,
)
from changestream.demo.base import TourBase
from changestream.render import (
    describe,
    lineage_tree,
    plural,
    short_token,
)


@dataclass(frozen=True, slots=True)
class PartitionQuery:
    """One change stream query to run: a partition token and where to start reading it."""

    token: str
    start: int
    parents: tuple[str, ...] = ()


@dataclass(slots=True)
class WorkflowResult:
    """What a run of the query workflow returned."""

    data: list[DataChangeRecord] = field(default_factory=list)
    #: The child partitions records, by the token of the partition that returned them.
    children: dict[str, list[ChildPartitionsRecord]] = field(default_factory=dict)


class WorkflowSteps(TourBase):
    """Steps 5 to 7: the query workflow down to the live partitions, and a merge."""

    def initial_query(self, stream: str, start: int, end: int, show: bool) -> list[PartitionQuery]:
        """The first query of the workflow: no partition token, answered with the partitions
        that cover the key space at ``start``."""
        records = list(self.db.read_change_stream(stream, start, end, None, WORKFLOW_HEARTBEAT_MS))
        queries: list[PartitionQuery] = []
        for record in records:
            if show:
                self.show(record)
            queries.extend(
                PartitionQuery(child.token, record.timestamp) for child in record.children
            )
        return queries

    def follow(
        self, stream: str, first: list[PartitionQuery], end: int, show: bool
    ) -> WorkflowResult:
        """Run the documented query workflow from ``first`` up to ``end``.

        Each wave queries its partitions in parallel (one thread each) and then prints their
        records in a fixed order. A child partition joins the next wave only once every one
        of its parents has finished, which keeps each key's changes in commit order.
        """
        result = WorkflowResult()
        finished: set[str] = set()
        scheduled = {query.token for query in first}
        names = self.partition_names(stream)

        def read(query: PartitionQuery) -> list[ChangeRecord]:
            return list(
                self.db.read_change_stream(
                    stream, query.start, end, query.token, WORKFLOW_HEARTBEAT_MS
                )
            )

        wave = first
        number = 0
        with ThreadPoolExecutor(max_workers=4) as pool:
            while wave:
                number += 1
                if show:
                    self.note(
                        f"wave {number}: {plural(len(wave), 'partition')}, queried in parallel"
                    )
                next_wave: list[PartitionQuery] = []
                for query, records in zip(wave, pool.map(read, wave), strict=True):
                    if show:
                        self.console.print(
                            Text(f"partition {describe(names[query.token])}", style="bold")
                        )
                    if show and not records:
                        self.console.print(Text("(no records in this time range)"))
                    children: list[PartitionQuery] = []
                    for record in records:
                        if show:
                            self.show(record)
                        if isinstance(record, DataChangeRecord):
                            result.data.append(record)
                        elif isinstance(record, ChildPartitionsRecord):
                            result.children.setdefault(query.token, []).append(record)
                            children.extend(
                                PartitionQuery(
                                    c.token, record.start_timestamp, c.parent_partition_tokens
                                )
                                for c in record.child_partitions
                            )
                    finished.add(query.token)
                    next_wave += self._ready(children, finished, scheduled, show)
                wave = next_wave
        return result

    def _ready(
        self, children: list[PartitionQuery], finished: set[str], scheduled: set[str], show: bool
    ) -> list[PartitionQuery]:
        """The children that may be read now: each only once, and only after all its parents
        finished. A merge child announced by its first parent waits for the others."""
        ready: list[PartitionQuery] = []
        for child in children:
            if child.token in scheduled:
                continue
            if not parents_finished(child.parents, finished):
                if show:
                    waiting_for = [p for p in child.parents if p not in finished]
                    self.note(
                        f"child {short_token(child.token)} must wait for its other parent(s): "
                        f"{', '.join(short_token(p) for p in waiting_for)}"
                    )
                continue
            if show and len(child.parents) > 1:
                self.note(
                    f"all parents of {short_token(child.token)} have finished: "
                    "it is read in the next wave"
                )
            scheduled.add(child.token)
            ready.append(child)
        return ready

    def query_workflow(self) -> None:
        """Steps 5 and 6: the initial query, then the partitions down to the live ones."""
        self.step(
            "5. The initial query",
            "With partition_token NULL, the read function answers with a child partitions "
            "record naming the partitions to read from start_timestamp (here: the stream's "
            "creation). end_timestamp is the transfer's commit time, so every query finishes.",
        )
        first = self.initial_query(STREAM, self.created, self.transfer_ts, show=True)
        self.step(
            "6. Following the partitions",
            "Query each partition from its child partitions record's start_timestamp. A "
            "partition that was split returns its data records, then a child partitions "
            "record naming its children, and finishes.",
        )
        result = self.follow(STREAM, first, self.transfer_ts, show=True)
        transfer = [r for r in result.data if r.commit_timestamp == self.transfer_ts]
        self.note(
            f"the transfer came back as {len(transfer)} records from {len(transfer)} partitions "
            f"(number_of_partitions_in_transaction = "
            f"{transfer[0].number_of_partitions_in_transaction}, one server_transaction_id "
            f"{transfer[0].server_transaction_id}, record_sequence "
            f"{' and '.join(r.record_sequence for r in transfer)})"
        )

    def merge(self) -> None:
        """Step 7: a merge, announced by both parents, read after both."""
        self.step(
            "7. A merge",
            "Merge the partitions of [Id2, Id3) and [Id3, ∞) into one, then move 250 from Id2 "
            "to Id3, which now touches a single partition.",
        )
        self.db.merge_at(TABLE, ("Id3",))
        after_merge = self.transfer("Id2", "Id3", 250, TRANSFER_TAG)
        self.console.print(
            lineage_tree(f"change stream {STREAM}", self.db.partition_history(STREAM))
        )
        merged = next(p for p in self.db.partitions(STREAM) if len(p.parent_tokens) > 1)
        self.note(
            "both parents are read from just after the transfer (end_timestamp is inclusive), "
            "in parallel; each returns the same child partitions record"
        )
        parents = [PartitionQuery(t, self.transfer_ts + 1) for t in merged.parent_tokens]
        result = self.follow(STREAM, parents, after_merge, show=True)
        announced = [result.children[t][0].to_dict() for t in merged.parent_tokens]
        same = announced[0] == announced[1]
        self.note(f"both parents returned the same child partitions record: {same}")
