"""Every form a column value takes, from the one module that owns them: each round-trips, and
the names that moved there still answer from their old modules, with a warning."""

from __future__ import annotations

import datetime as dt
import decimal
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from changestream import codecs
from changestream.types import ColumnType

VALUES: list[tuple[ColumnType, Any]] = [
    (ColumnType("BOOL"), True),
    (ColumnType("INT64"), -(2**63)),
    (ColumnType("FLOAT64"), -math.inf),
    (ColumnType("NUMERIC"), decimal.Decimal("-12345678901234567890123456789.123456789")),
    (ColumnType("STRING"), "Zoë"),
    (ColumnType("BYTES"), b"\x00\xff"),
    (ColumnType("DATE"), dt.date(1, 1, 1)),
    (ColumnType("TIMESTAMP"), dt.datetime(999, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC)),
    (ColumnType("JSON"), {"b": [1, None], "a": "x"}),
    (ColumnType("ARRAY", element=ColumnType("NUMERIC")), [decimal.Decimal("1.5"), None]),
    (ColumnType("ARRAY", element=ColumnType("JSON")), [{"k": 1}, None]),
]


@pytest.mark.parametrize(("ctype", "value"), VALUES, ids=[str(t) for t, _ in VALUES])
def test_every_form_round_trips(ctype: ColumnType, value: Any) -> None:
    assert codecs.from_sqlite(ctype, codecs.to_sqlite(ctype, value)) == value
    assert codecs.from_json_value(ctype, codecs.to_json_value(ctype, value)) == value
    assert codecs.text_decoder(ctype)(codecs.text_encoder(ctype)(value)) == value
    for encoder in (codecs.record_encoder, codecs.event_encoder, codecs.text_encoder):
        assert encoder(ctype)(None) is None


def test_a_nan_float_becomes_text_in_json_and_survives_sqlite() -> None:
    ctype = ColumnType("FLOAT64")
    assert codecs.to_json_value(ctype, math.nan) == "NaN"
    assert math.isnan(codecs.from_sqlite(ctype, codecs.to_sqlite(ctype, math.nan)))


def test_event_json_differs_from_the_record_form_only_for_json_documents() -> None:
    document = {"b": 1, "a": [True]}
    assert codecs.record_encoder(ColumnType("JSON"))(document) is document
    assert codecs.event_encoder(ColumnType("JSON"))(document) == '{"a":[true],"b":1}'
    moment = dt.datetime(2026, 11, 24, 1, 2, 3, 456789, tzinfo=dt.UTC)
    for ctype, value in [(ColumnType("TIMESTAMP"), moment), (ColumnType("BYTES"), b"hi")]:
        assert codecs.event_encoder(ctype)(value) == codecs.record_encoder(ctype)(value)
    assert codecs.record_encoder(ColumnType("TIMESTAMP"))(moment) == "2026-11-24T01:02:03.456789Z"


def test_forms_that_need_no_conversion_are_the_identity() -> None:
    for code in ("BOOL", "INT64", "STRING"):
        assert codecs.record_encoder(ColumnType(code)) is codecs.identity
        assert codecs.event_encoder(ColumnType(code)) is codecs.identity
    assert codecs.record_encoder(ColumnType("JSON")) is codecs.identity
    assert codecs.event_encoder(ColumnType("JSON")) is not codecs.identity


def test_moved_names_still_answer_from_their_old_modules() -> None:
    from changestream import types
    from changestream.datastream import codecs as old_codecs

    with pytest.warns(DeprecationWarning, match="changestream.codecs.record_encoder"):
        assert types.json_encoder is codecs.record_encoder
    with pytest.warns(DeprecationWarning, match="changestream.codecs.event_encoder"):
        assert old_codecs.json_encoder is codecs.event_encoder
    with pytest.raises(AttributeError):
        _ = old_codecs.no_such_name


@pytest.mark.parametrize(("ctype", "value"), VALUES, ids=[str(t) for t, _ in VALUES])
def test_a_stored_value_reaches_event_json_as_it_would_through_python(
    ctype: ColumnType, value: Any
) -> None:
    stored = codecs.to_json_value(ctype, value)
    through_python = codecs.event_encoder(ctype)(codecs.from_json_value(ctype, stored))
    assert codecs.record_to_event(ctype)(stored) == through_python


@given(st.datetimes(min_value=dt.datetime(1, 1, 2), timezones=st.just(dt.UTC)))
def test_a_utc_datetime_is_written_as_the_microsecond_text_of_its_instant(
    moment: dt.datetime,
) -> None:
    from changestream.clock import parse_ts
    from changestream.types import normalize

    assert codecs.timestamp_text(moment) == codecs.micros_text(parse_ts(moment))
    assert normalize(ColumnType("TIMESTAMP"), moment) == moment
    shifted = moment.astimezone(dt.timezone(dt.timedelta(hours=-3)))
    assert codecs.timestamp_text(shifted) == codecs.timestamp_text(moment)
    assert normalize(ColumnType("TIMESTAMP"), shifted) == moment
