"""Row parsers compiled per row shape: a source's tuple of values in, the mirror's values out.
The hottest loop of a busy source, so each shape gets its own function: a tuple display with
one call per column that needs one."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from changestream.sources.definition import UNCHANGED

RowParser = Callable[[Sequence[Any]], tuple[Any, ...]]


def row_parser(
    parsers: Sequence[Callable[[Any], Any] | None], positions: Sequence[int] | None = None
) -> RowParser:
    """A function from a row to the mirror's values of the columns at ``positions`` (default:
    all, in order), each through its parser (None: the value as it is). None and
    ``UNCHANGED`` stay as they are. The generated source holds only positions and generated
    names."""
    at = list(positions) if positions is not None else list(range(len(parsers)))
    namespace: dict[str, Any] = {"UNCHANGED": UNCHANGED}
    items = []
    for number, (position, parse) in enumerate(zip(at, parsers, strict=True)):
        if parse is None:
            items.append(f"t[{position}]")
        else:
            namespace[f"p{number}"] = parse
            items.append(f"(v if (v := t[{position}]) is None or v is UNCHANGED else p{number}(v))")
    source = f"def row(t):\n    return ({', '.join(items)},)\n"
    exec(compile(source, "<changestream row parser>", "exec"), namespace)
    built: RowParser = namespace["row"]
    return built
