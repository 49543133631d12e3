"""A record's mods, and the two forms the change log stores them in.

The seed's form is a list of ``{"keys": {...}, "new_values": {...}, "old_values": {...}}``
objects under ``"mods"``. When every mod of a record has the same columns (a batch of
inserts: the common bulk case), capture stores the compact form instead, in the same place:

- ``"mod_columns"``: ``[key names, new value names, old value names]``;
- ``"mod_values"``: one array per mod, its keys, new values then old values in that order.

It holds the same mods in less than half the bytes, and costs capture no object per mod:
the change log is written in the committing transaction, so its size is the write path's.
Readers get the seed's form back, as :class:`Mod` objects (:func:`decode_mods`) or as
JSON (:func:`seed_form`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgspec
import orjson

COLUMNS_FIELD = "mod_columns"
VALUES_FIELD = "mod_values"


class Mod(msgspec.Struct, frozen=True, gc=False):
    """One modified row: its keys and the new and old values of non-key columns.

    Immutable, compared field by field, picklable. The garbage collector does not track it
    (its fields are plain dicts, which hold no reference back to it): readers keep batches of
    records alive while a processor works, and each record then leaves the collector one
    object fewer to walk. ``msgspec.structs.replace(mod, ...)`` copies one with changes.
    """

    keys: dict[str, Any]
    new_values: dict[str, Any]
    old_values: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"keys": self.keys, "new_values": self.new_values, "old_values": self.old_values}


ModDecoder = Callable[[list[list[Any]]], tuple[Mod, ...]]

#: Decoders of the compact form already compiled, by the JSON of their columns (bounded).
_DECODERS: dict[bytes, ModDecoder] = {}
_MAX_DECODERS = 1024


def compact_columns(
    keys: Sequence[str], new_values: Sequence[str], old_values: Sequence[str]
) -> list[list[str]]:
    """The ``mod_columns`` of records whose mods hold these columns."""
    return [list(keys), list(new_values), list(old_values)]


def decode_mods(data: dict[str, Any]) -> tuple[Mod, ...]:
    """The mods of a stored record's JSON fields, whichever form they are stored in."""
    values = data.get(VALUES_FIELD)
    if values is None:
        return tuple([Mod(m["keys"], m["new_values"], m["old_values"]) for m in data["mods"]])
    columns = data[COLUMNS_FIELD]
    return _decoder(orjson.dumps(columns), columns)(values)


def compact_decoder(columns_json: bytes) -> ModDecoder:
    """:func:`decode_mods`'s decoder of compact mods whose ``mod_columns`` JSON is
    ``columns_json``."""
    return _DECODERS.get(columns_json) or _decoder(columns_json, orjson.loads(columns_json))


def seed_form(payload: bytes) -> bytes:
    """A stored record's JSON with its mods in the seed's form (unchanged if they are)."""
    if f'"{VALUES_FIELD}"'.encode() not in payload:
        return payload
    data = orjson.loads(payload)
    if VALUES_FIELD not in data:
        return payload
    seed: dict[str, Any] = {}
    for name, value in data.items():
        if name == COLUMNS_FIELD:
            seed["mods"] = [mod.to_dict() for mod in decode_mods(data)]
        elif name != VALUES_FIELD:
            seed[name] = value
    return orjson.dumps(seed)


def _decoder(key: bytes, columns: list[list[str]]) -> ModDecoder:
    """A function turning compact mods of these columns (``key``: their JSON) into
    :class:`Mod` objects.

    It is compiled for the exact columns, one dict display per side: about as fast as the
    JSON parser building the seed form's dicts. The generated source holds only ``repr``s of
    column names and integers.
    """
    decoder = _DECODERS.get(key)
    if decoder is not None:
        return decoder
    position = 0
    sides = []
    for names in columns:
        items = []
        for name in names:
            items.append(f"{name!r}: r[{position}]")
            position += 1
        sides.append("{" + ", ".join(items) + "}")
    source = f"def decode(rows):\n    return tuple([Mod({', '.join(sides)}) for r in rows])\n"
    namespace: dict[str, Any] = {"Mod": Mod}
    exec(compile(source, "<changestream mod decoder>", "exec"), namespace)
    compiled: ModDecoder = namespace["decode"]
    if len(_DECODERS) >= _MAX_DECODERS:
        _DECODERS.clear()
    _DECODERS[key] = compiled
    return compiled
