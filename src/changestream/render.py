"""How changestream prints for people: JSON lines and documented JSON, partitions as one line or
a lineage tree, and counted nouns (the CLI and the demo tours)."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
from typing import Any

import orjson
from rich.text import Text
from rich.tree import Tree

from changestream.clock import format_ts, parse_ts
from changestream.streams.models import Partition


def _json_default(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        return format_ts(parse_ts(value))
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode()
    raise TypeError(f"cannot render {type(value).__name__} as JSON")


def json_line(value: Any) -> str:
    """``value`` as one line of JSON: timestamps in RFC 3339, NUMERIC as text, BYTES in base64."""
    return orjson.dumps(
        value, default=_json_default, option=orjson.OPT_PASSTHROUGH_DATETIME
    ).decode()


def short_token(token: str) -> str:
    """A token's last ten characters: its leading ones are shared by every partition of a
    stream (they encode the format version and the stream), the trailing ones tell them apart."""
    return "…" + token[-10:]


def describe(partition: Partition) -> str:
    """One line for a partition: short token, key range, time range, and (live ones) the
    write rate the split policy sees."""
    end = "live" if partition.end_timestamp is None else format_ts(partition.end_timestamp)
    rate = f"  {partition.write_rate:.1f} mods/s" if partition.end_timestamp is None else ""
    return (
        f"{short_token(partition.token)}  [{partition.start_key}, {partition.end_key})  "
        f"{format_ts(partition.start_timestamp)} → {end}{rate}"
    )


def lineage_tree(title: str, history: list[Partition]) -> Tree:
    """The partitions of ``history`` (oldest first) nested under their parents.

    Roots are partitions none of whose parents are in ``history`` (the first partition, or
    the ones live when the stream was created). A merge child is drawn whole under its first
    parent and as a reference under the others, so repeated split/merge cycles stay small.
    """
    by_token = {p.token: p for p in history}
    tree = Tree(Text(title))

    def add(branch: Tree, partition: Partition) -> None:
        parents = [t for t in partition.parent_tokens if t in by_token]
        label = describe(partition)
        if len(parents) > 1:
            label += f"  (merge of {' + '.join(short_token(t) for t in parents)})"
        node = branch.add(Text(label))
        for token in partition.child_tokens:
            child = by_token.get(token)
            if child is None:
                continue
            first_parent = next(t for t in child.parent_tokens if t in by_token)
            if first_parent == partition.token:
                add(node, child)
            else:
                reference = f"{short_token(child.token)}  merge child, drawn under "
                node.add(Text(reference + short_token(first_parent)))

    for partition in history:
        if not any(t in by_token for t in partition.parent_tokens):
            add(tree, partition)
    return tree


def documented_json(value: Any, indent: int = 0, room: int = 76) -> str:
    """Indented JSON laid out like the documentation's examples: an object or array that fits in
    ``room`` characters stays on one line, so ``"type": {"code": "STRING"}`` reads as one."""
    inline = json.dumps(value, ensure_ascii=False)
    if not isinstance(value, dict | list) or not value or len(inline) <= room - indent:
        return inline
    pad = " " * (indent + 2)
    if isinstance(value, dict):
        items = []
        for key, item in value.items():
            name = json.dumps(key, ensure_ascii=False) + ": "
            items.append(pad + name + documented_json(item, indent + 2, room - len(name)))
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    items = [pad + documented_json(item, indent + 2, room) for item in value]
    return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"


def plural(count: int, noun: str) -> str:
    """``1 partition``, ``2 partitions``."""
    return f"{count} {noun}{'' if count == 1 else 's'}"
