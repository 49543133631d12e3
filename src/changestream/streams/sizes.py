"""How much one partition range of a change stream holds, told without reading its records:
what a planner needs to cut a micro-batch at a limit of changes or bytes (see
``changestream.spark.planning``), without paying for every record on its own machine."""

from __future__ import annotations

from dataclasses import dataclass

#: The most sizes one call returns (a planner pages through longer ranges), and how many
#: it returns when not told.
MAX_SIZES = 100_000
DEFAULT_SIZES = 10_000


@dataclass(frozen=True, slots=True)
class ChangeSize:
    """The data change records of one partition committed at ``commit_timestamp``: how many
    (``records``), their mods (``mods``), and the bytes of their JSON as stored (``bytes``,
    about what the read function returns of them)."""

    commit_timestamp: int
    records: int
    mods: int
    bytes: int
