"""A change-log payload read in one pass (msgspec) gives the record the JSON fields give."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from changestream.streams.records import DataChangeRecord

_NAMES = st.sampled_from(["Id", "Name", "Qty", "ção", "a b", "Id2"])
_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(exclude_categories=("Cs",)), max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=5,
)
_COLUMN = st.fixed_dictionaries(
    {
        "name": _NAMES,
        "type": st.sampled_from([{"code": "INT64"}, {"code": "STRING"}, {"code": "JSON"}]),
        "is_primary_key": st.booleans(),
        "ordinal_position": st.integers(1, 9),
    }
)


@st.composite
def payloads(draw: st.DrawFn) -> dict[str, Any]:
    """A record's JSON fields as the engine writes them: mods in the seed's form or compact
    (``mod_columns`` and ``mod_values``), ``session_id`` only on its own streams."""
    fields: dict[str, Any] = {
        "record_sequence": f"{draw(st.integers(0, 99)):08d}",
        "server_transaction_id": str(draw(st.integers(0, 10**6))),
        "is_last_record_in_transaction_in_partition": draw(st.booleans()),
        "table_name": draw(_NAMES),
        "column_types": draw(st.lists(_COLUMN, max_size=3)),
    }
    if draw(st.booleans()):
        keys = draw(st.lists(_NAMES, min_size=1, max_size=2, unique=True))
        new = draw(st.lists(_NAMES.filter(lambda n: n not in keys), max_size=2, unique=True))
        width = len(keys) + len(new)
        rows = draw(st.lists(st.lists(_VALUES, min_size=width, max_size=width), max_size=3))
        fields["mod_columns"] = [keys, new, []]
        fields["mod_values"] = rows
    else:
        side = st.dictionaries(_NAMES, _VALUES, max_size=3)
        mods = st.fixed_dictionaries({"keys": side, "new_values": side, "old_values": side})
        fields["mods"] = draw(st.lists(mods, max_size=3))
    fields |= {
        "mod_type": draw(st.sampled_from(["INSERT", "UPDATE", "DELETE"])),
        "value_capture_type": "OLD_AND_NEW_VALUES",
        "number_of_records_in_transaction": draw(st.integers(1, 5)),
        "number_of_partitions_in_transaction": draw(st.integers(1, 5)),
        "transaction_tag": draw(st.text(max_size=4)),
        "is_system_transaction": draw(st.booleans()),
    }
    if draw(st.booleans()):
        fields["session_id"] = draw(st.text(max_size=4))
    return fields


@settings(max_examples=300)
@given(fields=payloads(), timestamp=st.integers(0, 2**62))
def test_a_payload_decodes_to_the_record_its_json_fields_give(
    fields: dict[str, Any], timestamp: int
) -> None:
    payload = orjson.dumps(fields)
    record = DataChangeRecord.from_payload(timestamp, payload, "token")
    assert record == DataChangeRecord.from_dict(timestamp, orjson.loads(payload), "token")
    assert (record.partition_token, record.session_id) == ("token", fields.get("session_id", ""))
    # Twice: the second time from the caches of column types and compact decoders.
    assert DataChangeRecord.from_payload(timestamp, payload, "token") == record


@pytest.mark.parametrize(
    "change",
    [
        {"drop": "mods"},
        {"drop": "table_name"},
        {"set": {"mod_columns": [["Id"], [], []]}},
        {"set": {"mod_values": [[1]]}},
        {"set": {"mods": "not a list"}},
        {"set": {"is_system_transaction": "yes"}},
    ],
)
def test_a_payload_of_another_shape_fails_as_its_json_fields_do(change: dict[str, Any]) -> None:
    """Anything but exactly one form of mods, or a field of another type, is decoded by
    ``from_dict`` (its error, or its record), not guessed at."""
    fields: dict[str, Any] = {
        "record_sequence": "00000000",
        "server_transaction_id": "1",
        "is_last_record_in_transaction_in_partition": True,
        "table_name": "T",
        "column_types": [],
        "mods": [{"keys": {"Id": 1}, "new_values": {}, "old_values": {}}],
        "mod_type": "INSERT",
        "value_capture_type": "NEW_ROW",
        "number_of_records_in_transaction": 1,
        "number_of_partitions_in_transaction": 1,
        "transaction_tag": "",
        "is_system_transaction": False,
    }
    fields.pop(change.get("drop", ""), None)
    fields |= change.get("set", {})
    payload = orjson.dumps(fields)

    def outcome(decode: Any) -> Any:
        try:
            return decode()
        except Exception as exc:
            return type(exc)

    fast = outcome(lambda: DataChangeRecord.from_payload(1, payload))
    slow = outcome(lambda: DataChangeRecord.from_dict(1, orjson.loads(payload)))
    assert fast == slow
