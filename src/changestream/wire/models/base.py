"""The base of every body: keyword-only Structs that leave defaults out; requests also refuse
fields they do not know."""

from __future__ import annotations

import msgspec


class Model(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A response body (clients ignore fields they do not know, so the server may add some)."""


class Request(Model, forbid_unknown_fields=True):
    """A request body: a field the server does not know is an error, not silently dropped."""
