"""``changestream.connect(url)``: a database on a ``changestream serve`` server, with the same
roles as the embedded one. It speaks the declared endpoints of :mod:`changestream.wire` and
imports no server code: ``http`` (requests, retries, errors), ``database``
(:class:`RemoteDatabase`), ``transaction`` and ``leases``."""

from changestream.remote._database import RemoteDatabase, connect
from changestream.remote._leases import RemoteLeaseTable
from changestream.remote._transaction import RemoteTransaction

__all__ = ["RemoteDatabase", "RemoteLeaseTable", "RemoteTransaction", "connect"]
