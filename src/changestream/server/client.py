"""Moved: the remote client is :mod:`changestream.remote` (it is a client, not the server)."""

import warnings

from changestream.remote import RemoteDatabase, RemoteLeaseTable, RemoteTransaction, connect

warnings.warn(
    "changestream.server.client moved to changestream.remote; import it from there",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = ["RemoteDatabase", "RemoteLeaseTable", "RemoteTransaction", "connect"]
