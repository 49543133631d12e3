"""Helpers shared by the CLI commands: opening a database file and rendering values as JSON."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

import changestream
from changestream.render import json_line as json_line

if TYPE_CHECKING:
    from changestream.remote import RemoteDatabase


#: Where the group's ``--token`` option leaves the token for :func:`open_database`.
TOKEN_KEY = "changestream.token"
#: Where the group's ``--ca-cert`` option leaves the CA bundle for :func:`open_database`.
CA_CERT_KEY = "changestream.ca_cert"


_F = TypeVar("_F", bound=Callable[..., Any])


def setting(
    name: str, default: Any, kind: click.ParamType[Any], text: str, **more: Any
) -> Callable[[_F], _F]:
    """An option with a default that ``--help`` shows: ``kind`` checks it, ``text`` says it."""
    return click.option(name, type=kind, default=default, show_default=True, help=text, **more)


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
