"""The object open() returns offers what a user calls and nothing of the engine; the roles are
small, typed without Any, and both databases satisfy each of them."""

from __future__ import annotations

import inspect
import re
import typing
from pathlib import Path

import pytest

import changestream
from changestream.embedded import store_of
from changestream.remote import RemoteDatabase
from changestream.streams import roles

ROLES = [
    roles.TableStore,
    roles.ChangeStreamSource,
    roles.SplitAdministration,
    roles.LeaseStore,
    roles.DocumentStore,
    roles.WatchSourceProvider,
]
ENGINE_ONLY = {"connection", "write", "catalog", "capture", "read_meta", "locked", "codec", "now"}


def test_the_database_offers_no_engine_member_and_no_secret(
    db: changestream.EmbeddedDatabase,
) -> None:
    public = {n for n in dir(db) if not n.startswith("_")}
    assert not public & ENGINE_ONLY
    assert "secret" not in public
    with pytest.raises(AttributeError, match="not part of the database's interface"):
        db.secret  # noqa: B018
    # What users call, and no more: a new member belongs to a role (the last one added was
    # StoredPayloadSource.read_change_payloads, the change log's JSON as stored, which the
    # pipeline's tasks build events from in DuckDB: the embedded database's role alone).
    assert len(public) <= 35, sorted(public)
    assert isinstance(db, roles.StoredPayloadSource)
    assert not hasattr(RemoteDatabase, "read_change_payloads")
    assert store_of(db).secret  # the engine's own layers still reach it


def test_moved_members_still_work_with_a_deprecation_warning(
    db: changestream.EmbeddedDatabase,
) -> None:
    with pytest.warns(DeprecationWarning, match=r"EmbeddedDatabase.last_commit_ts .*store_of"):
        last = db.last_commit_ts()
    assert last == store_of(db).last_commit_ts()
    with pytest.raises(AttributeError, match="no attribute 'nonsense'"):
        db.nonsense  # noqa: B018


@pytest.mark.parametrize("role", ROLES, ids=lambda r: r.__name__)
def test_both_databases_satisfy_every_role(db: changestream.EmbeddedDatabase, role: type) -> None:
    assert isinstance(db, role)
    for name in _members(role):
        assert callable(getattr(RemoteDatabase, name, None)) or name in ("name",), name


@pytest.mark.parametrize(
    "protocol", [*ROLES, roles.TransactionLike, roles.LeaseTableLike], ids=lambda r: r.__name__
)
def test_roles_are_small_and_say_what_every_parameter_is(protocol: type) -> None:
    members = _members(protocol)
    assert 0 < len(members) <= 10, members
    for name in members:
        member = inspect.getattr_static(protocol, name)
        function = member.fget if isinstance(member, property) else member
        hints = typing.get_type_hints(function, vars(roles))
        params = [p for p in inspect.signature(function).parameters if p != "self"]
        assert set(params) <= set(hints) and "return" in hints, (protocol, name)
        for hint in hints.values():
            assert "Any" not in repr(hint), (protocol.__name__, name, hint)


def test_consumers_name_roles_not_the_whole_database() -> None:
    source = Path(changestream.__file__).parent
    wide = [
        str(path.relative_to(source))
        for package in ("client", "watch", "datastream", "spark")
        for path in (source / package).rglob("*.py")
        if re.search(r"^from .* import .*\bDatabase\b", path.read_text(encoding="utf-8"), re.M)
    ]
    assert wide == []


def _members(protocol: type) -> set[str]:
    return {
        name
        for cls in protocol.__mro__
        if cls.__module__.startswith("changestream.")
        for name, value in vars(cls).items()
        if not name.startswith("_") and (inspect.isfunction(value) or isinstance(value, property))
    }


def test_layers_below_the_top_open_a_path_through_what_the_top_registered(
    tmp_path: Path,
) -> None:
    from changestream.streams.opening import open_database

    path = str(tmp_path / "opened.db")
    with changestream.open(path) as db:
        db.execute_ddl("CREATE TABLE T (K INT64 NOT NULL) PRIMARY KEY (K)")
    opened = open_database(path)
    try:
        assert isinstance(opened, changestream.EmbeddedDatabase)
        assert [t.name for t in opened.tables()] == ["T"]
    finally:
        opened.close()
    with pytest.raises(changestream.NotFound, match="no database file"):
        open_database(str(tmp_path / "missing.db"))
