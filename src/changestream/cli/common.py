"""Helpers shared by the CLI commands: opening a database file and rendering values as JSON."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
from typing import TYPE_CHECKING, Any

import click
import orjson

import changestream
from changestream.clock import format_ts, parse_ts

if TYPE_CHECKING:
    from changestream.remote import RemoteDatabase


#: Where the group's ``--token`` option leaves the token for :func:`open_database`.
TOKEN_KEY = "changestream.token"
#: Where the group's ``--ca-cert`` option leaves the CA bundle for :func:`open_database`.
CA_CERT_KEY = "changestream.ca_cert"


def open_database(
    path: str, *, create: bool = False
) -> changestream.EmbeddedDatabase | RemoteDatabase:
    """Open the database at ``path``; unless ``create``, a missing file is an error.

    An ``http(s)://`` URL connects to a server instead (with ``--token``, or
    ``$CHANGESTREAM_TOKEN``, and ``--ca-cert``); a server never creates databases.
    """
    context = click.get_current_context(silent=True)
    meta = {} if context is None else context.meta
    verify = meta.get(CA_CERT_KEY) or True
    return changestream.open_path_or_url(path, meta.get(TOKEN_KEY), create=create, verify=verify)


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
