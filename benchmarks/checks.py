"""What every benchmark shares: checks that fail the run, and goals printed beside figures.

A benchmark whose reader lost or repeated something must not print a rate. ``expect`` stops the
run (exit status 1, no JSON line) when a measured outcome differs from what the benchmark wrote.
``goals`` puts each goal from the issues beside its figure, with whether it was met; the JSON line
carries them under ``"goals"`` and each is also printed to stderr as one readable line.

Fault injection for the tests that prove these checks can fail: ``tests/faults/sitecustomize.py``
(put on ``PYTHONPATH`` with ``CHANGESTREAM_FAULT=drop-every-10th``) makes every change stream
read drop every tenth data change record, in this process and every child it starts.
"""

from __future__ import annotations

import operator
import sys
from collections import Counter
from collections.abc import Iterable
from typing import Any

_OPS = {"<=": operator.le, ">=": operator.ge, "<": operator.lt}


class CheckFailed(SystemExit):
    """A benchmark read something other than what it wrote."""


def expect(what: str, got: object, expected: object) -> None:
    """Stop the run unless ``got == expected``; lists are reported by what is missing or extra."""
    if got == expected:
        return
    if isinstance(got, list) and isinstance(expected, list):
        missing = Counter(expected) - Counter(got)
        extra = Counter(got) - Counter(expected)
        raise CheckFailed(
            f"check failed: {what}: {len(got)} items, expected {len(expected)}; "
            f"{sum(missing.values())} missing (e.g. {sorted(missing)[:5]}), "
            f"{sum(extra.values())} extra or repeated (e.g. {sorted(extra)[:5]})"
        )
    raise CheckFailed(f"check failed: {what}: got {got!r}, expected {expected!r}")


def key_checksum(keys: Iterable[int]) -> tuple[int, int, int]:
    """(count, sum, sum of squares) of integer keys: a lost, extra or repeated key changes it."""
    count = total = squares = 0
    for key in keys:
        count += 1
        total += key
        squares += key * key
    return count, total, squares


def goal(figure: str, value: Any, op: str, target: float, source: str) -> dict[str, Any]:
    """One goal: ``value op target`` (``op`` one of <=, >=, <), from ``source``."""
    met = value is not None and bool(_OPS[op](value, target))
    return {
        "figure": figure,
        "value": value,
        "goal": f"{op} {target:g}",
        "from": source,
        "met": met,
    }


def goals(result: dict[str, Any], entries: list[dict[str, Any]]) -> dict[str, Any]:
    """Adds ``entries`` to ``result`` under "goals" and prints each as a line to stderr."""
    result["goals"] = entries
    name = result.get("benchmark", "benchmark")
    for entry in entries:
        verdict = "met" if entry["met"] else "NOT met"
        print(
            f"{name}: {entry['figure']} = {entry['value']} (goal {entry['goal']}, "
            f"{entry['from']}): {verdict}",
            file=sys.stderr,
        )
    if not entries:
        print(f"{name}: no goal set in the issues for this benchmark", file=sys.stderr)
    return result
