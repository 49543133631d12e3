"""Row deletion policies (Spanner's TTL): rows whose policy column is older than the policy's
interval are deleted, a table at a time, each in one system transaction that change streams
record (``is_system_transaction: true``) unless they set ``exclude_ttl_deletes``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from changestream.clock import to_datetime
from changestream.store.transaction import Transaction

if TYPE_CHECKING:
    from changestream.store.database import Store

_DAY_US = 86_400_000_000


def delete_expired_rows(store: Store) -> int:
    """Delete every expired row now; returns how many rows were deleted."""
    deleted = 0
    for table in list(store.catalog().tables.values()):
        policy = table.row_deletion_policy
        if policy is None:
            continue
        cutoff = to_datetime(store.now() - policy.days * _DAY_US)
        # One DML statement in the transaction: a row refreshed meanwhile is not deleted.
        # GoogleSQL quotes names with backquotes (table and column names hold none).
        dml = f"DELETE FROM `{table.name}` WHERE `{policy.column}` < @cutoff"
        with Transaction(store, tag="row deletion policy", row_deletion=True) as tx:
            deleted += tx.execute_update(dml, {"cutoff": cutoff})
    return deleted
