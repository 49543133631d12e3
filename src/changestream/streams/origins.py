"""Where a table's changes come from when a source database feeds it: the mirror table's origin
(written by :mod:`changestream.sources`, read by the pipeline for the source's own event
metadata), and the source position each mirrored transaction carries in its tag."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from changestream.streams.roles import DocumentStore

#: The system document kind of table origins: one document per mirror table, by its name.
ORIGIN_KIND = "table-origin"


@dataclass(frozen=True, slots=True)
class TableOrigin:
    """A mirror table's source: the kind of database (``postgresql``), the source's name and
    the table there."""

    kind: str
    source: str
    schema: str
    table: str

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "source": self.source,
            "schema": self.schema,
            "table": self.table,
        }

    @staticmethod
    def from_json(body: dict[str, Any]) -> TableOrigin:
        return TableOrigin(
            str(body["kind"]), str(body["source"]), str(body["schema"]), str(body["table"])
        )


def table_origins(db: DocumentStore) -> dict[str, TableOrigin]:
    """The origin of every mirror table of ``db``, by table name."""
    return {
        name: TableOrigin.from_json(dict(document.body))
        for name, document in db.system_documents(ORIGIN_KIND).items()
    }


def source_tag(source: str, transaction_id: str, position: str) -> str:
    """The tag of a changestream transaction that applies one source transaction."""
    return f"source={source},tx_id={transaction_id},position={position}"


def source_of_tag(tag: str) -> tuple[str, str] | None:
    """(source transaction id, source position) from a :func:`source_tag`, else None."""
    if not tag.startswith("source="):
        return None
    fields = dict(part.partition("=")[::2] for part in tag.split(","))
    if "tx_id" not in fields or "position" not in fields:
        return None
    return fields["tx_id"], fields["position"]
