"""Backfill jobs: one per stream object, started and stopped while the stream runs, in
Datastream's terms (``BackfillJob``: NOT_STARTED, PENDING, ACTIVE, STOPPED, FAILED, COMPLETED,
UNSUPPORTED).

Starting a job again after it completed re-reads the object: an ad-hoc re-snapshot, as
Debezium's ``execute-snapshot`` signal does, optionally of the rows a filter keeps
(``where``, Debezium's ``additional-conditions``). A stopped job started again with the same
filter goes on from the chunks it had not read. The pipeline runs the jobs (see
``spark.pipeline``), and tries a FAILED one again, from its unread chunks, when it runs again;
this module only records what was asked.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from changestream.errors import ChangeStreamError, FailedPrecondition, InvalidArgument, NotFound

if TYPE_CHECKING:
    from changestream.datastream.catalog import ObjectBackfill, StreamCatalog
    from changestream.datastream.definition import StreamDefinition
    from changestream.ddl.schema import Table
    from changestream.streams.roles import TableStore

#: ``ObjectBackfill.detail`` keys: the job's filter, and what started it.
WHERE = "where"
TRIGGER = "trigger"
#: The job state of each backfill status.
JOB_STATES = {
    "pending": "PENDING",
    "running": "ACTIVE",
    "done": "COMPLETED",
    "stopped": "STOPPED",
    "failed": "FAILED",
}
ACTIVE_STATUSES = ("pending", "running")


def backfill_job(
    definition: StreamDefinition, entry: ObjectBackfill | None, present: bool
) -> dict[str, Any]:
    """An object's backfill job for ``describe``: state, trigger, filter and rows (``present``:
    whether the object is among the stream's objects now)."""
    automatic = definition.backfill == "automatic"
    detail = {} if entry is None else entry.detail
    job: dict[str, Any] = {
        "state": JOB_STATES["pending"] if automatic else "NOT_STARTED",
        "trigger": detail.get(TRIGGER, "automatic" if automatic else None),
        "filter": detail.get(WHERE),
        "rows": 0 if entry is None else entry.rows,
    }
    if entry is not None:
        job["state"] = JOB_STATES[entry.status]
    if not present:
        job["state"] = "UNSUPPORTED"
        job["reason"] = "the table is no longer one of the stream's objects"
    return job


def start_backfill(
    catalog: StreamCatalog, name: str, object: str, where: str | None = None
) -> ObjectBackfill:
    """Start the backfill job of ``object`` of stream ``name``: a stopped job goes on (with the
    same ``where``), any other reads the object again, keeping the rows ``where`` (a SQL
    condition on the table) keeps. FailedPrecondition while the job is active."""
    table = _table(catalog, name, object)
    if where is not None:
        where = _checked_condition(catalog, table, where)
    entry = catalog.progress(name).objects.get(object)
    status = _status(catalog, name, entry)
    if status in ACTIVE_STATUSES:
        raise FailedPrecondition(
            f"the backfill of {object} is {JOB_STATES[status]}; stop it before starting it again"
        )
    if entry is not None and status == "stopped" and entry.detail.get(WHERE) == where:
        return catalog.set_object_backfill(name, object, "pending")
    detail = {TRIGGER: "manual", WHERE: where}
    return catalog.set_object_backfill(name, object, "pending", rows=0, detail=detail, fresh=True)


def stop_backfill(catalog: StreamCatalog, name: str, object: str) -> ObjectBackfill:
    """Stop the active backfill job of ``object``: the pipeline reads no further chunk of it
    (events of chunks already read stay). FailedPrecondition when the job is not active."""
    _table(catalog, name, object)
    entry = catalog.progress(name).objects.get(object)
    status = _status(catalog, name, entry)
    if status not in ACTIVE_STATUSES:
        state = "NOT_STARTED" if status is None else JOB_STATES[status]
        raise FailedPrecondition(f"the backfill of {object} is not active (it is {state})")
    return catalog.set_object_backfill(name, object, "stopped")


def _status(catalog: StreamCatalog, name: str, entry: ObjectBackfill | None) -> str | None:
    """The backfill status of an object (an automatic stream's unstarted object: pending)."""
    if entry is not None:
        return entry.status
    return "pending" if catalog.get(name).definition.backfill == "automatic" else None


def _table(catalog: StreamCatalog, name: str, object: str) -> str:
    definition = catalog.get(name).definition
    tables = {definition.object_name(t.name): t.name for t in definition.tables(catalog.db)}
    if object not in tables:
        known = ", ".join(sorted(tables)) or "none"
        raise NotFound(f"stream {name!r} has no object {object!r} (objects: {known})")
    return tables[object]


def _checked_condition(catalog: StreamCatalog, table: str, where: str) -> str:
    """``where`` as a condition on ``table`` that the database's SQL accepts."""
    if not isinstance(where, str) or not where.strip():
        raise InvalidArgument("a backfill filter must be a SQL condition, such as Amount > 100")
    try:
        list(catalog.db.execute_sql(f"SELECT 1 FROM `{table}` WHERE {where} LIMIT 1"))
    except ChangeStreamError as exc:
        raise InvalidArgument(
            f"the backfill filter {where!r} is not a condition on table {table}: {exc}"
        ) from exc
    return where.strip()


def filtered_keys(db: TableStore, table: Table, where: str) -> frozenset[tuple[Any, ...]]:
    """The keys of the rows of ``table`` that SQL condition ``where`` keeps. Read once, before
    the job's chunks: a row changed meanwhile is filtered by its earlier state (its change is
    a CDC event of its own)."""
    keys = ", ".join(f"`{k}`" for k in table.primary_key)
    return frozenset(
        tuple(row) for row in db.execute_sql(f"SELECT {keys} FROM `{table.name}` WHERE {where}")
    )
