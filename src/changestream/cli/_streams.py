"""``changestream streams``: Datastream-style stream definitions and their lifecycle, and
``changestream discover``: the objects of a source database."""

from __future__ import annotations

import urllib.parse
from dataclasses import replace
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from changestream.cli._backfill import backfill
from changestream.cli._common import json_line, open_database, setting
from changestream.clock import format_ts
from changestream.datastream import StreamCatalog, StreamDefinition, discover
from changestream.datastream.definition import parse_names
from changestream.datastream.validation import Check, CheckStatus, refuse_on_failure
from changestream.ddl.schema import options_text
from changestream.errors import InvalidArgument
from changestream.streams.roles import Named

_DB_HELP = "The source database (a file PATH or an http(s):// URL); it holds the streams too."
_JSON_HELP = "Print JSON instead of a table."


def _source(path: str, db: Named) -> str:
    """The source as the definition stores it: as given, but a server URL without a database
    name gets the served database's name, so the stream's object names are fixed."""
    parsed = urllib.parse.urlsplit(path)
    if parsed.scheme in ("http", "https") and not parsed.path.strip("/"):
        return path.rstrip("/") + "/" + urllib.parse.quote(db.name, safe="")
    return path


def _names(text: str | None, what: str = "include") -> tuple[str, ...]:
    return () if text is None else parse_names(text, what)


def _print(renderable: Any) -> None:
    Console(soft_wrap=True).print(renderable)


@click.group()
def streams() -> None:
    """Define streams from a change stream to event files (and Delta replicas), and move
    them through their lifecycle: Not started, Starting, Running, Draining, Paused, Failed,
    Failed permanently.

    start and resume only change the state; `changestream pipeline run NAME --db D` does
    the work (and moves a Starting stream to Running).
    """


streams.add_command(backfill)

_VALIDATE_ONLY = click.option(
    "--validate-only",
    is_flag=True,
    help="Run every validation check, print each (PASSED, FAILED or WARNING) and change "
    "nothing; exits 2 when a check fails.",
)
_FORCE = click.option("--force", is_flag=True, help="Skip validation.")
_DATA_FRESHNESS = click.option(
    "--data-freshness",
    type=float,
    metavar="SECONDS",
    help="Bound how long a change may wait before the replica reflects it (Datastream's "
    "staleness limit): a micro-batch every third of it.",
)


@streams.command()
@click.argument("name")
@click.option("--db", "db_path", required=True, metavar="PATH_OR_URL", help=_DB_HELP)
@click.option("--change-stream", required=True, metavar="S", help="The change stream to read.")
@click.option(
    "--destination", required=True, metavar="DIR", help="Directory the event files go to."
)
@click.option(
    "--format",
    "file_format",
    type=click.Choice(["json", "avro"]),
    default="json",
    show_default=True,
    help="Event file format.",
)
@click.option("--replica", metavar="DIR", help="Keep Delta Lake replica tables in DIR.")
@click.option(
    "--include",
    metavar="T1,T2(c1,c2)",
    help="Only these tables (default: every table the change stream watches); a column list "
    "in parentheses keeps only those columns (and the key) in events and replicas.",
)
@click.option("--exclude", metavar="T3", help="Leave these tables out (comma-separated).")
@setting(
    "--backfill",
    "automatic",
    click.Choice(["automatic", "none"]),
    "automatic: emit every existing row before the changes; none: only the changes.",
)
@setting(
    "--file-rotation-mb",
    50.0,
    click.FLOAT,
    "Close an event file once it holds this many megabytes.",
)
@setting(
    "--file-rotation-interval",
    60.0,
    click.FLOAT,
    "Close an event file once its first event is this old.",
    metavar="SECONDS",
)
@setting(
    "--replica-dropped-columns",
    "keep",
    click.Choice(["keep", "drop"]),
    "A column dropped from a source table: keep it in the replica (nullable, with the "
    "values it had) or drop it (the Delta table is rewritten at its next change).",
)
@setting(
    "--compression",
    "none",
    click.Choice(["none", "gzip"]),
    "Compress JSON event files with gzip (.jsonl.gz).",
)
@setting(
    "--schema-file",
    "none",
    click.Choice(["none", "avro"]),
    "With JSON files: also write the Avro schema of each schema_key the events carry, "
    "as <destination>/<object>/_schemas/<schema_key>.avsc.",
)
@setting(
    "--replica-mode",
    "merge",
    click.Choice(["merge", "append-only"]),
    "merge: the replica equals the source, one row per key; append-only: every event "
    "is appended with its change type (the history).",
)
@_DATA_FRESHNESS
@_VALIDATE_ONLY
@_FORCE
def create(
    name: str,
    db_path: str,
    change_stream: str,
    destination: str,
    file_format: str,
    replica: str | None,
    include: str | None,
    exclude: str | None,
    backfill: str,
    file_rotation_mb: float,
    file_rotation_interval: float,
    replica_dropped_columns: str,
    compression: str,
    schema_file: str,
    replica_mode: str,
    data_freshness: float | None,
    validate_only: bool,
    force: bool,
) -> None:
    """Define stream NAME, in state Not started.

    The change stream must capture NEW_ROW_AND_OLD_VALUES (or NEW_ROW, whose deletes
    carry only the keys), and every table named must exist.

    \b
    Example:
      changestream streams create orders --db shop.db --change-stream Orders \\
          --destination out/events --replica out/replica --format avro
    """
    with open_database(db_path) as db:
        definition = StreamDefinition(
            name=name,
            database=_source(db_path, db),
            change_stream=change_stream,
            include=_names(include),
            exclude=_names(exclude, "exclude"),
            destination=destination,
            format=file_format,
            replica=replica,
            backfill=backfill,
            file_rotation_mb=file_rotation_mb,
            file_rotation_interval=file_rotation_interval,
            replica_dropped_columns=replica_dropped_columns,
            compression=compression,
            schema_file=schema_file,
            replica_mode=replica_mode,
            data_freshness=data_freshness,
        )
        catalog = StreamCatalog(db)
        if (validate_only or not force) and _validated(
            catalog.validate(definition), f"stream {name!r}", validate_only
        ):
            return
        info = catalog.create(definition, force=True)
        objects = [definition.object_name(t.name) for t in definition.tables(db)]
    click.echo(
        f"created stream {name} ({info.state.value}), objects: {', '.join(objects) or 'none yet'}"
    )


@streams.command()
@click.argument("name")
@click.option("--db", "db_path", required=True, metavar="PATH_OR_URL", help=_DB_HELP)
@click.option(
    "--include",
    metavar="T1,T2(c1,c2)",
    help="Only these tables, or columns of them ('' for every watched one).",
)
@click.option("--exclude", metavar="T3", help="Leave these tables out ('' for none).")
@click.option("--format", "file_format", type=click.Choice(["json", "avro"]), help="For new files.")
@click.option("--compression", type=click.Choice(["none", "gzip"]), help="For new JSON files.")
@click.option("--schema-file", type=click.Choice(["none", "avro"]), help="For new JSON files.")
@click.option("--file-rotation-mb", type=float, help="Close event files at this many MB.")
@click.option("--file-rotation-interval", type=float, metavar="SECONDS", help="...or this age.")
@click.option("--backfill", type=click.Choice(["automatic", "none"]), help="For added objects.")
@click.option("--replica-dropped-columns", type=click.Choice(["keep", "drop"]))
@_DATA_FRESHNESS
@_VALIDATE_ONLY
@_FORCE
def update(
    name: str,
    db_path: str,
    include: str | None,
    exclude: str | None,
    file_format: str | None,
    compression: str | None,
    schema_file: str | None,
    file_rotation_mb: float | None,
    file_rotation_interval: float | None,
    backfill: str | None,
    replica_dropped_columns: str | None,
    data_freshness: float | None,
    validate_only: bool,
    force: bool,
) -> None:
    """Change stream NAME's definition, even while its pipeline runs: the pipeline follows
    at its next micro-batch, and an added object is backfilled (with --backfill automatic).
    Only the options given change; the source, change stream, destination and replica stay.

    \b
    Example:
      changestream streams update orders --db shop.db --include Orders,Customers
    """
    given: dict[str, Any] = {
        "include": None if include is None else _names(include),
        "exclude": None if exclude is None else _names(exclude, "exclude"),
        "format": file_format,
        "compression": compression,
        "schema_file": schema_file,
        "file_rotation_mb": file_rotation_mb,
        "file_rotation_interval": file_rotation_interval,
        "backfill": backfill,
        "replica_dropped_columns": replica_dropped_columns,
        "data_freshness": data_freshness,
    }
    changes = {field: value for field, value in given.items() if value is not None}
    with open_database(db_path) as db:
        catalog = StreamCatalog(db)
        definition = replace(catalog.get(name).definition, **changes)
        what = f"update of stream {name!r}"
        if (validate_only or not force) and _validated(
            catalog.validate(definition), what, validate_only
        ):
            return
        catalog.update(name, force=True, **changes)
    changed = ", ".join(sorted(changes)) or "nothing"
    click.echo(f"updated stream {name}: {changed}")


@streams.command(name="list")
@click.option("--db", "db_path", required=True, metavar="PATH_OR_URL", help=_DB_HELP)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per stream.")
def list_streams(db_path: str, as_json: bool) -> None:
    """List the streams defined in the database, with their states."""
    with open_database(db_path) as db:
        found = StreamCatalog(db).list()
    if as_json:
        for info in found:
            click.echo(
                json_line(
                    {
                        "name": info.name,
                        "state": info.state.value,
                        "definition": info.definition.to_display_dict(),
                    }
                )
            )
        return
    table = Table("name", "state", "change stream", "format", "destination", "replica", "created")
    for info in found:
        d = info.definition
        table.add_row(
            d.name,
            info.state.value,
            d.change_stream,
            d.format,
            d.destination,
            d.replica or "-",
            format_ts(d.created_at),
        )
    _print(table)


def _freshness(freshness: dict[str, Any]) -> str:
    limit = freshness["limit_seconds"]
    shown = "no limit" if limit is None else f"limit {limit:g}s"
    if "max_seconds" in freshness:
        shown += (
            f"; observed {freshness['last_seconds']:.1f}s, at most {freshness['max_seconds']:.1f}s"
        )
    return shown


def _attached(pipeline: dict[str, Any] | None) -> str:
    if pipeline is None:
        return "not attached (no `pipeline run` is running)"
    return f"attached (pid {pipeline['pid']} on {pipeline['host']})"


@streams.command()
@click.argument("name")
@click.option("--db", "db_path", required=True, metavar="PATH_OR_URL", help=_DB_HELP)
@click.option("--json", "as_json", is_flag=True, help=_JSON_HELP)
def describe(name: str, db_path: str, as_json: bool) -> None:
    """Show stream NAME: state, definition, backfill progress per object, rows processed,
    whether a pipeline is attached and, while one is, its lag behind the source."""
    with open_database(db_path) as db:
        described = StreamCatalog(db).describe(name)
    if as_json:
        click.echo(json_line(described))
        return
    d = described["definition"]
    lag = described["lag_seconds"]
    summary = Table(show_header=False, box=None, title=f"stream {name}", title_justify="left")
    for label, value in (
        ("state", f"{described['state']} (since {described['state_changed_at']})"),
        ("source", f"{d['database']}, change stream {d['change_stream']}"),
        ("include", ", ".join(d["include"]) or "all watched tables"),
        ("exclude", ", ".join(d["exclude"]) or "-"),
        ("destination", f"{d['destination']} ({d['format']})"),
        ("replica", d["replica"] or "-"),
        ("backfill", d["backfill"]),
        ("rows processed", str(described["rows_processed"])),
        ("last processed commit", described["last_processed_commit_timestamp"] or "-"),
        ("cdc start", described["cdc_start_timestamp"] or "-"),
        ("last recovery", described["cdc_recovered_at"] or "-"),
        ("pipeline", _attached(described["pipeline"])),
        ("lag", "-" if lag is None else f"{lag:.1f}s"),
        ("data freshness", _freshness(described["data_freshness"])),
    ):
        summary.add_row(label, value)
    objects = Table("object", "table", "backfill job", "filter", "rows")
    for entry in described["objects"]:
        job = entry["backfill_job"]
        objects.add_row(
            entry["object"],
            entry["table"] or "-",
            job["state"],
            job["filter"] or "-",
            str(entry["rows"]),
        )
    _print(summary)
    _print(objects)


def _validated(checks: list[Check], what: str, validate_only: bool) -> bool:
    """Print every check (--validate-only) or the warnings (on stderr), and refuse on a failed
    one; True when only validation was asked for (it passed)."""
    for check in checks:
        if validate_only:
            click.echo(check.line())
        elif check.status is CheckStatus.WARNING:
            click.echo(f"warning: {check.name}: {check.message}", err=True)
    refuse_on_failure(checks, what)
    if validate_only:
        click.echo(f"{what} passed validation; nothing was changed")
    return validate_only


def _verb(verb: str, summary: str) -> click.Command:
    validated = verb in ("start", "resume")

    @click.command(name=verb, help=summary)
    @click.argument("name")
    @click.option("--db", "db_path", required=True, metavar="PATH_OR_URL", help=_DB_HELP)
    def command(
        name: str,
        db_path: str,
        validate_only: bool = False,
        force: bool = False,
        cdc_start: str | None = None,
        cdc_start_timestamp: str | None = None,
    ) -> None:
        if cdc_start is not None and cdc_start_timestamp is not None:
            raise InvalidArgument("give --cdc-start or --cdc-start-timestamp, not both")
        recovering = cdc_start is not None or cdc_start_timestamp is not None
        with open_database(db_path) as db:
            catalog = StreamCatalog(db)
            what = f"{verb} of stream {name!r}"
            # A restart from a chosen position is checked as it is set, not the old position.
            if (
                validated
                and not recovering
                and (validate_only or not force)
                and _validated(catalog.validate(name), what, validate_only)
            ):
                return
            if not recovering:
                state = catalog.transition(name, verb)
                click.echo(f"stream {name} is now {state.value}")
                return
            strategy = "timestamp" if cdc_start_timestamp is not None else cdc_start
            state, restart = catalog.recover(name, strategy or "most-recent", cdc_start_timestamp)
        where = "where it was" if restart is None else f"from {format_ts(restart)}"
        click.echo(f"stream {name} is now {state.value}; CDC carries on {where}")

    if validated:
        command = _FORCE(_VALIDATE_ONLY(command))
        command = click.option(
            "--cdc-start",
            type=click.Choice(["most-recent", "next-available"]),
            help="Datastream's CDC start strategy: most-recent carries on from the last "
            "position read; next-available skips to the oldest change kept when that position "
            "has expired (recording the gap). Either also recovers a stream Failed permanently.",
        )(command)
        command = click.option(
            "--cdc-start-timestamp",
            metavar="TIMESTAMP",
            help="Replay CDC from TIMESTAMP (RFC 3339, within the change stream's retention): "
            "events come again, replicas stay equal to the source.",
        )(command)
    return command


streams.add_command(
    _verb(
        "start",
        "Start stream NAME (Not started or Paused -> Starting); `changestream pipeline run` "
        "then backfills and streams it.",
    )
)
streams.add_command(_verb("pause", "Pause stream NAME (Starting, Running or Failed -> Paused)."))
streams.add_command(
    _verb("resume", "Resume stream NAME (Paused or Failed -> Starting), where it stopped.")
)
streams.add_command(
    _verb(
        "drain",
        "Drain stream NAME (Running -> Draining): the pipeline finishes what it has read, "
        "then pauses the stream.",
    )
)


@streams.command()
@click.argument("name")
@click.option("--db", "db_path", required=True, metavar="PATH_OR_URL", help=_DB_HELP)
def delete(name: str, db_path: str) -> None:
    """Delete stream NAME with its progress and errors (when Not started, Paused, Failed or
    Failed permanently). Event files and replicas are left in place."""
    with open_database(db_path) as db:
        StreamCatalog(db).delete(name)
    click.echo(f"deleted stream {name}")


@streams.command()
@click.argument("name")
@click.option("--db", "db_path", required=True, metavar="PATH_OR_URL", help=_DB_HELP)
@setting("--limit", 100, click.IntRange(1, 10_000), "Show at most this many of the latest errors.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per error.")
def errors(name: str, db_path: str, limit: int, as_json: bool) -> None:
    """Show the errors of stream NAME, oldest first (FetchStreamErrors): time, object,
    message, and whether the pipeline retries it."""
    with open_database(db_path) as db:
        found = StreamCatalog(db).errors(name, limit)
    if as_json:
        for error in found:
            click.echo(json_line(error.to_dict()))
        return
    table = Table("time", "object", "retriable", "message")
    for error in found:
        table.add_row(
            format_ts(error.time),
            error.object or "-",
            "yes" if error.retriable else "no",
            error.message,
        )
    _print(table)


@click.command(name="discover")
@click.argument("path_or_url")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per object (table).")
def discover_command(path_or_url: str, as_json: bool) -> None:
    """List the objects of the database at PATH_OR_URL: schema, table, object name,
    columns with their types, nullability and positions, and primary keys in key order."""
    with open_database(path_or_url) as db:
        found = discover(db)
    if as_json:
        for obj in found:
            click.echo(json_line(obj.to_dict()))
        return
    for obj in found:
        table = Table(
            "#",
            "column",
            "type",
            "nullable",
            "key",
            title=f"{obj.object_name}  ({obj.schema}.{obj.table}, primary key "
            f"{', '.join(obj.primary_keys)})",
            title_justify="left",
        )
        for column in obj.columns:
            key = str(obj.primary_keys.index(column.name) + 1) if column.is_primary_key else ""
            table.add_row(
                str(column.ordinal_position),
                column.name,
                column.type,
                "yes" if column.nullable else "no",
                key,
            )
        tracked = [f"{s['name']} ({options_text(s)})" for s in obj.change_streams]
        table.caption = f"change streams: {'; '.join(tracked) or 'none'}"
        table.caption_justify = "left"
        _print(table)
