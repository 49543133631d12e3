"""What a MySQL / MariaDB DDL statement of the binlog does to the columns of a table, and
which tables it empties or renames.

Row events name a table's columns as they are at that event, so a column added later shows
in the next row event. What they cannot show is a column dropped and added again under the
same name (the server gives every row the new column's default, with no row event), one
renamed (every row keeps its value under the new name, with no row event), or one given another
type (the server converts every row's value, with no row event). The statement in
the binlog's query event says so, in the binlog's order; this module reads it with sqlglot.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Literal

import sqlglot
from sqlglot import exp

log = logging.getLogger("changestream.sources")

#: ``ALTER``, after any comments (other statements are not parsed: BEGIN comes with every
#: transaction).
_ALTER = re.compile(r"\s*(?:/\*.*?\*/\s*)*ALTER\b", re.IGNORECASE | re.DOTALL)
#: A name, quoted or not.
_NAME = r"(?:`(?:[^`]|``)+`|[\w$]+)"
#: An ``ALTER TABLE``'s head, with what sqlglot does not read and changes no column or name:
#: ``ONLINE`` and ``IGNORE`` (MariaDB, MySQL 5), and MariaDB's ``WAIT n`` / ``NOWAIT``.
_ALTER_HEAD = re.compile(
    rf"(\s*(?:/\*.*?\*/\s*)*)ALTER\s+(?:ONLINE\s+)?(?:IGNORE\s+)?TABLE\s+"
    rf"((?:IF\s+EXISTS\s+)?{_NAME}(?:\s*\.\s*{_NAME})?)(?:\s+(?:WAIT\s+\d+|NOWAIT)\b)?",
    re.IGNORECASE | re.DOTALL,
)
#: ``RENAME AS``, MySQL's other spelling of ``RENAME TO``.
_RENAME_AS = re.compile(r"\bRENAME\s+AS\b", re.IGNORECASE)
#: ``TRUNCATE`` or ``DROP``, after any comments.
_EMPTYING = re.compile(r"\s*(?:/\*.*?\*/\s*)*(?:TRUNCATE|DROP)\b", re.IGNORECASE | re.DOTALL)


@dataclass(frozen=True, slots=True)
class ColumnChange:
    """A column of source table ``table`` (``database.table``) dropped, renamed to
    ``new_name``, or given a type (``retype``: the server converted every row's value)."""

    table: str
    kind: Literal["drop", "rename", "retype"]
    column: str
    new_name: str = ""


def _parsed_alter(statement: str) -> exp.Expr | None:
    """``statement`` (an ``ALTER``) as sqlglot reads it, once what it does not read but that
    changes no column or name is left out (see ``_ALTER_HEAD``) and ``RENAME AS`` is spelled
    ``RENAME TO``; None when it cannot read it."""
    head = _ALTER_HEAD.match(statement)
    if head is not None:
        statement = f"{head.group(1)}ALTER TABLE {head.group(2)}{statement[head.end() :]}"
    try:
        parsed = sqlglot.parse_one(_RENAME_AS.sub("RENAME TO", statement), read="mysql")
    except sqlglot.errors.ParseError:
        return None
    return None if isinstance(parsed, exp.Command) else parsed


def column_changes(statement: str, database: str) -> list[ColumnChange]:
    """The drops, renames and new types of columns ``statement`` makes, in its order;
    ``database`` is the one the statement ran in (for a table it does not qualify). Anything
    but ``ALTER TABLE`` makes none, and so does a statement sqlglot cannot read (logged)."""
    if not _ALTER.match(statement):
        return []
    parsed = _parsed_alter(statement)
    if parsed is None:
        log.warning(
            "could not read the source's statement %r: a column it drops and adds again, "
            "renames or gives a type is not followed (columns are followed by name)",
            statement[:200],
        )
        return []
    if not isinstance(parsed, exp.Alter) or parsed.args.get("kind") != "TABLE":
        return []
    target = parsed.this
    table = f"{target.db or database}.{target.name}"
    changes: list[ColumnChange] = []
    for action in parsed.args.get("actions") or []:
        if isinstance(action, exp.Drop) and action.args.get("kind") == "COLUMN":
            changes += [ColumnChange(table, "drop", c.name) for c in action.args["tables"]]
        elif isinstance(action, exp.RenameColumn):
            changes.append(ColumnChange(table, "rename", action.this.name, action.args["to"].name))
        elif isinstance(action, exp.ModifyColumn):
            new = action.this.name
            old = action.args["rename_from"].name if action.args.get("rename_from") else new
            if old != new:
                changes.append(ColumnChange(table, "rename", old, new))
            changes.append(ColumnChange(table, "retype", new))
    return changes


def emptied_tables(statement: str, database: str) -> list[str]:
    """The tables (``database.table``) ``statement`` empties with no row event: ``TRUNCATE``
    (logged as a statement whatever the binlog's format) and ``DROP TABLE`` (not of a
    temporary table); ``database`` is the one it ran in."""
    if not _EMPTYING.match(statement):
        return []
    try:
        parsed = sqlglot.parse_one(statement, read="mysql")
    except sqlglot.errors.ParseError:
        return []
    if isinstance(parsed, exp.TruncateTable):
        tables = parsed.expressions
    elif (
        isinstance(parsed, exp.Drop)
        and parsed.args.get("kind") == "TABLE"
        and not parsed.args.get("temporary")
    ):
        tables = parsed.args.get("tables") or []
    else:
        return []
    return [f"{t.db or database}.{t.name}" for t in tables if isinstance(t, exp.Table)]


#: ``RENAME TABLE``, after any comments, with what follows it.
_RENAME = re.compile(
    r"\s*(?:/\*.*?\*/\s*)*RENAME\s+TABLES?\s+(?:IF\s+EXISTS\s+)?(.*)", re.IGNORECASE | re.DOTALL
)
#: One ``old [WAIT n | NOWAIT] TO new`` of a ``RENAME TABLE`` (MariaDB waits so long for
#: the table's lock).
_RENAMED = re.compile(
    rf"\s*({_NAME}(?:\s*\.\s*{_NAME})?)(?:\s+(?:WAIT\s+\d+|NOWAIT))?\s+TO\s+"
    rf"({_NAME}(?:\s*\.\s*{_NAME})?)\s*(,|$)",
    re.IGNORECASE,
)


def renamed_tables(statement: str, database: str) -> list[tuple[str, str]]:
    """The tables ``statement`` renames (``database.table`` before and after), in its
    order: ``RENAME TABLE a TO b, ...`` (which sqlglot does not read) and ``ALTER TABLE a
    RENAME [TO | AS] b``; ``database`` is the one it ran in."""
    found = _RENAME.match(statement)
    if found is not None:
        renames: list[tuple[str, str]] = []
        rest = found.group(1).strip().rstrip(";")
        while rest:
            pair = _RENAMED.match(rest)
            if pair is None:
                log.warning("could not read the source's statement %r", statement[:200])
                return []
            renames.append(
                (_qualified(pair.group(1), database), _qualified(pair.group(2), database))
            )
            rest = rest[pair.end() :]
        return renames
    if not _ALTER.match(statement):
        return []
    parsed = _parsed_alter(statement)
    if not isinstance(parsed, exp.Alter) or parsed.args.get("kind") != "TABLE":
        return []
    target = parsed.this
    old = f"{target.db or database}.{target.name}"
    return [
        (old, f"{action.this.db or database}.{action.this.name}")
        for action in parsed.args.get("actions") or []
        if isinstance(action, exp.AlterRename)
    ]


def _qualified(name: str, database: str) -> str:
    """``database.table`` of a name as a statement writes it (quoted or not, qualified or
    not)."""
    parts = [
        p[1:-1].replace("``", "`") if p.startswith("`") else p for p in re.findall(_NAME, name)
    ]
    return ".".join(parts) if len(parts) == 2 else f"{database}.{parts[0]}"
