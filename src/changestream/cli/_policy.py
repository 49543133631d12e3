"""``changestream policy``: show or change the split policy, and rebalance on demand."""

from __future__ import annotations

import dataclasses
from typing import Any

import click

from changestream.cli._common import json_line, open_database
from changestream.errors import InvalidArgument
from changestream.store.policy import SplitPolicy

_SETTINGS = {f.name: f.type for f in dataclasses.fields(SplitPolicy)}


def _parse_setting(text: str) -> tuple[str, Any]:
    name, sep, raw = text.partition("=")
    if not sep or name not in _SETTINGS:
        raise InvalidArgument(
            f"--set takes NAME=VALUE with NAME one of {', '.join(_SETTINGS)}; got {text!r}"
        )
    if name == "enabled":
        if raw.lower() not in ("true", "false"):
            raise InvalidArgument(f"enabled must be true or false, got {raw!r}")
        return name, raw.lower() == "true"
    try:
        return name, int(raw) if _SETTINGS[name] in (int, "int") else float(raw)
    except ValueError as exc:
        raise InvalidArgument(f"{name} must be a number, got {raw!r}") from exc


@click.command()
@click.argument("path")
@click.option(
    "--set",
    "settings",
    multiple=True,
    metavar="NAME=VALUE",
    help="Change one setting (repeatable), e.g. --set max_rows=50000 --set enabled=false.",
)
@click.option("--rebalance", is_flag=True, help="Apply the policy now and list what it did.")
def policy(path: str, settings: tuple[str, ...], rebalance: bool) -> None:
    """Show the split policy of the database at PATH, change it, or apply it now.

    Splits split when they hold more than max_rows rows or take more than max_write_rate
    mods/s over window_seconds; adjacent splits merge when together they stay under
    merge_max_rows and merge_max_write_rate. min_lifetime_seconds keeps new partitions from
    flapping; the policy runs every check_interval_seconds in one writing process.
    """
    with open_database(path) as db:
        if settings:
            db.set_split_policy(db.split_policy().replace(**dict(map(_parse_setting, settings))))
        click.echo(json_line(db.split_policy().to_dict()))
        if rebalance:
            for action in db.rebalance():
                kind = "merge" if action.merge else "split"
                click.echo(json_line({"action": kind, "reason": action.reason}))
