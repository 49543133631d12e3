"""The optional parts of changestream, each installed with an extra, and one clear error when
a part is used without it (instead of a ``ModuleNotFoundError`` from deep inside)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from changestream.errors import FailedPrecondition

_CLIENT = frozenset({"httpx", "httpcore", "h11", "anyio", "sniffio"})
#: The top-level modules each extra brings (with the ones they pull in themselves).
MODULES = {
    "client": _CLIENT,
    "server": _CLIENT | {"starlette", "uvicorn", "prometheus_client", "swagger_ui", "jinja2"},
    "spark": frozenset({"pyspark", "py4j", "pyarrow", "pandas", "deltalake", "fastavro"}),
}


class MissingExtra(FailedPrecondition):
    """A part of changestream was used without the extra that installs what it needs."""


@contextmanager
def needs(extra: str, what: str) -> Iterator[None]:
    """Run the block; if it fails to import a module of ``extra``, raise MissingExtra saying
    that ``what`` needs it and how to install it."""
    try:
        yield
    except ModuleNotFoundError as exc:
        missing = (exc.name or "").split(".")[0]
        if missing not in MODULES[extra]:
            raise
        raise MissingExtra(
            f"{what} needs the {extra} extra ({missing} is not installed): "
            f"pip install 'changestream[{extra}]'"
        ) from exc
