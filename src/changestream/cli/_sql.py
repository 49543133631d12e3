"""``changestream sql``: run a query or a change stream read function, one JSON line per row."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from changestream.cli._common import json_line, open_database
from changestream.sql.params import UntypedText


def _parse_bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise ValueError(f"expected true or false, got {text!r}")


_CONVERTERS: dict[str, Callable[[str], Any]] = {
    "str": str,
    "int": int,
    "float": float,
    "bool": _parse_bool,
}


def parse_param(text: str) -> tuple[str, Any]:
    """``name=value``, ``name:type=value`` (type: str, int, float, bool) or ``name:null``.
    Without a type the value is untyped text, read as the type of the column it meets."""
    head, has_value, value = text.partition("=")
    name, _, kind = head.partition(":")
    if not kind and has_value and name:
        return name, UntypedText(value)  # read as the type of the column it meets
    kind = kind or "str"
    if not name:
        raise click.BadParameter(f"{text!r} has no parameter name", param_hint="--param")
    if kind == "null":
        if has_value:
            raise click.BadParameter(
                f"{text!r}: a null parameter takes no value", param_hint="--param"
            )
        return name, None
    if kind not in _CONVERTERS:
        allowed = ", ".join([*_CONVERTERS, "null"])
        raise click.BadParameter(f"{text!r}: type must be one of {allowed}", param_hint="--param")
    if not has_value:
        raise click.BadParameter(f"{text!r} needs a value: {head}=VALUE", param_hint="--param")
    try:
        return name, _CONVERTERS[kind](value)
    except ValueError as exc:
        raise click.BadParameter(f"{text!r}: {exc}", param_hint="--param") from exc


@click.command()
@click.argument("path")
@click.argument("query")
@click.option(
    "--param",
    "-p",
    "params",
    multiple=True,
    metavar="NAME[:TYPE]=VALUE",
    help="Bind a query parameter (repeatable). TYPE is str, int, float or bool; without one "
    "the value takes the type of the column it is compared with or assigned to (K = @k with "
    "K INT64 reads 5 as a number and refuses abc), else STRING. NAME:null binds NULL. @name "
    "in GoogleSQL; $1 in PostgreSQL is NAME 1.",
)
def sql(path: str, query: str, params: tuple[str, ...]) -> None:
    """Run QUERY on the database at PATH and print each row as a JSON object.

    QUERY is a SELECT over tables, or a change stream read function in GoogleSQL
    (SELECT ChangeRecord FROM READ_<stream>(...)) or PostgreSQL
    (SELECT * FROM "spanner"."read_json_<stream>"(...)). Rows are printed as they
    arrive, so a read with end_timestamp NULL tails a live partition until Ctrl-C.

    \b
    Timestamps print in RFC 3339, NUMERIC as a string, BYTES in base64.
    Example (START: a time since the change stream was made, such as the one
    `changestream ddl` printed when it made it):
      START=$(changestream ddl app.db "CREATE CHANGE STREAM TStream FOR T" | cut -d' ' -f3)
      changestream sql app.db \\
        "SELECT ChangeRecord FROM READ_TStream(start_timestamp => @start,
           partition_token => NULL, heartbeat_milliseconds => 10000)" \\
        --param start="$START"
    """
    bound = dict(parse_param(p) for p in params)
    with open_database(path) as db:
        result = db.execute_sql(query, bound)
        for row in result:
            click.echo(json_line(dict(zip(result.fields, row, strict=True))))
