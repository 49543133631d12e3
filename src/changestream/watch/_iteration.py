"""What every watch() cursor does the same way on top of its own ``try_next`` and ``close``:
blocking iteration and the context-manager protocol."""

from __future__ import annotations

from typing import Any, Self


class CursorIteration:
    """Mixin: ``for event in cursor`` waits for each event and ends once the cursor closes
    (``_closed``); ``with cursor:`` closes it at the end."""

    _closed: bool

    def try_next(self) -> dict[str, Any] | None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __iter__(self) -> Self:
        return self

    def __next__(self) -> dict[str, Any]:
        """The next event, waiting as long as it takes; StopIteration once closed."""
        while not self._closed:
            event = self.try_next()
            if event is not None:
                return event
        raise StopIteration

    next = __next__

    @property
    def alive(self) -> bool:
        """False once the cursor is closed (by :meth:`close` or after an invalidate event)."""
        return not self._closed

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
