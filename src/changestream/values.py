"""Checks of Python values against Spanner's limits, shared by every column type that needs them.

Each check returns ``None`` when the value is fine and otherwise a short reason, which the
caller puts into an error naming the column or parameter.
"""

from __future__ import annotations

import decimal
import math
import reprlib
from typing import Any

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
#: NUMERIC holds 38 significant digits, 9 of them after the decimal point.
NUMERIC_MAX_INTEGER_DIGITS = 29
NUMERIC_MAX_SCALE = 9
#: Spanner refuses JSON documents nested deeper than this.
JSON_MAX_DEPTH = 100


def text_problem(value: str) -> str | None:
    """Why ``value`` cannot be stored as UTF-8 text (a lone surrogate), or None."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"not valid Unicode: lone surrogate {value[exc.start]!r} at index {exc.start}"
    return None


def float_problem(value: int | float) -> str | None:
    """Why an int cannot become a FLOAT64 without rounding, or None (floats are all fine)."""
    if isinstance(value, float):
        return None
    try:
        exact = float(value) == value
    except OverflowError:
        exact = False
    return None if exact else "not exactly representable as a FLOAT64; pass a float"


def numeric_problem(value: decimal.Decimal) -> str | None:
    """Why ``value`` does not fit NUMERIC (finite, 29 integer digits, 9 fractional), or None."""
    if not value.is_finite():
        return "NUMERIC must be finite"
    _, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)
    beyond_scale = -exponent - NUMERIC_MAX_SCALE
    if beyond_scale > 0 and any(digits[-beyond_scale:]):
        return f"NUMERIC keeps at most {NUMERIC_MAX_SCALE} digits after the decimal point"
    if any(digits) and len(digits) + exponent > NUMERIC_MAX_INTEGER_DIGITS:
        return f"NUMERIC keeps at most {NUMERIC_MAX_INTEGER_DIGITS} digits before the point"
    return None


def json_problem(value: Any) -> str | None:
    """Why ``value`` is not a JSON document Spanner would keep unchanged, or None.

    Allowed: dict with str keys, list, str, int in the INT64 range, finite float, bool, None.
    """
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > JSON_MAX_DEPTH:
            return f"JSON nested deeper than {JSON_MAX_DEPTH} levels"
        if item is None or isinstance(item, bool):
            continue
        kind = type(item)
        if kind is str:
            problem = text_problem(item)
            if problem:
                return problem
        elif kind is int:
            if not INT64_MIN <= item <= INT64_MAX:
                return f"JSON integer {item} is outside the INT64 range"
        elif kind is float:
            if not math.isfinite(item):
                return f"JSON has no {item}"
        elif kind is list:
            stack.extend((element, depth + 1) for element in item)
        elif kind is dict:
            for key, element in item.items():
                if type(key) is not str:
                    return f"JSON object keys must be str, got {type(key).__name__} {key!r}"
                problem = text_problem(key)
                if problem:
                    return problem
                stack.append((element, depth + 1))
        else:
            return (
                f"JSON has no {kind.__name__} values "
                "(allowed: dict, list, str, int, float, bool, None)"
            )
    return None


def shown(value: object) -> str:
    """``repr(value)`` bounded in length and depth, for error messages about caller input."""
    return reprlib.repr(value)
